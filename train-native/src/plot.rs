//! SVG bar charts for the reports (plotters' SVG backend writes text as SVG text, so no
//! fonts are needed to draw them).

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// A bar chart of `bars` (label, value) with values in 0..=`max`, written to `path`.
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[(String, f64)],
    max: f64,
) -> Result<()> {
    let width = (120 + 70 * bars.len() as u32).max(480);
    let root = SVGBackend::new(path, (width, 400)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let n = bars.len().max(1) as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(56)
        .build_cartesian_2d((0u32..n).into_segmented(), 0f64..max.max(f64::MIN_POSITIVE))
        .map_err(err)?;
    let labels: Vec<String> = bars.iter().map(|(l, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        .x_labels(bars.len())
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let i = i as u32;
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), *v),
                ],
                RGBColor(46, 139, 87).filled(),
            );
            bar.set_margin(0, 0, 8, 8);
            bar
        }))
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One named series of (x, y) points for [`line_chart`].
pub struct Series<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
}

/// A line chart of `series` with y in 0..=`max`, written to `path` (points drawn as well, so a
/// series of one point shows).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    max: f64,
) -> Result<()> {
    let root = SVGBackend::new(path, (720, 420)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| anyhow!("drawing {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let x_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..x_max, 0f64..max.max(f64::MIN_POSITIVE))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(err)?;
    for s in series {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(s.points.iter().copied(), color))
            .map_err(err)?
            .label(s.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        chart
            .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_label() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.svg");
        let bars = vec![("alpha".to_string(), 0.25), ("beta".to_string(), 1.0)];
        bar_chart(&path, "resolve rate", "rate", &bars, 1.0).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100.min(svg.len())]);
        for text in ["resolve rate", "alpha", "beta"] {
            assert!(svg.contains(text), "{text} missing");
        }
        // Two bars filled in the bar colour.
        assert_eq!(svg.matches("#2E8B57").count(), 2, "{svg}");
    }

    #[test]
    fn a_line_chart_names_its_series_and_marks_every_point() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curve.svg");
        let series = [
            Series {
                name: "training",
                points: vec![(1.0, 0.2), (2.0, 0.5), (3.0, 0.4)],
                color: RGBColor(10, 20, 30),
            },
            Series {
                name: "held-out",
                points: vec![(0.0, 0.1)],
                color: RGBColor(200, 60, 40),
            },
        ];
        line_chart(&path, "reward", "updates", "mean reward", &series, 1.0).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in ["reward", "updates", "training", "held-out"] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
    }
}
