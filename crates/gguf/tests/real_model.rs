//! The reference model from `scripts/fetch-model.sh`, when it has been fetched.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lilypad_gguf::{ByteSource, GgmlType, GgufFile, MmapSource, Result, dequantize};

/// Hides the slice view, so parsing goes through chunked range reads as in the browser.
struct RangesOnly<'a>(&'a MmapSource);

impl ByteSource for RangesOnly<'_> {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.0.read_at(offset, buf)
    }
}

fn model_path() -> Option<PathBuf> {
    let path = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-model.sh)",
            path.display()
        );
        None
    }
}

#[test]
fn smollm2_135m_q4_1() {
    let Some(path) = model_path() else { return };
    let src = MmapSource::open(&path).unwrap();
    let f = GgufFile::read(&src).unwrap();
    let m = &f.metadata;

    eprintln!(
        "version {} alignment {} data at {} of {}",
        f.version, f.alignment, f.data_offset, f.file_len
    );
    for (k, v) in m.iter() {
        let shown = match v.as_array() {
            Some(a) => format!(
                "[{} x {}]",
                a.len(),
                a.first().map_or("?", |e| e.type_name())
            ),
            None => format!("{v:?}").chars().take(80).collect(),
        };
        eprintln!("  {k} = {shown}");
    }
    let mut by_type = BTreeMap::new();
    for t in &f.tensors {
        *by_type.entry(t.ty.name()).or_insert(0) += 1;
    }
    eprintln!(
        "{} tensors {by_type:?}, {} parameters",
        f.tensors.len(),
        f.parameter_count()
    );
    for t in f.tensors.iter().take(12) {
        eprintln!("  {} {:?} {}", t.name, t.dims, t.ty);
    }

    assert_eq!(f.version, 3);
    assert_eq!(m.architecture().unwrap(), "llama");
    assert_eq!(m.u32("llama.block_count").unwrap(), 30);
    assert_eq!(m.u32("llama.embedding_length").unwrap(), 576);
    assert_eq!(
        m.string_array("tokenizer.ggml.tokens").unwrap().len(),
        49152
    );
    assert_eq!(m.u32("llama.attention.head_count").unwrap(), 9);
    assert_eq!(m.u32("llama.attention.head_count_kv").unwrap(), 3);
    assert_eq!(f.tensors.len(), 272);
    let want: BTreeMap<&str, usize> = [("F32", 61), ("Q4_1", 210), ("Q8_0", 1)].into();
    assert_eq!(by_type, want);
    // The output projection is tied to the embedding.
    assert!(f.tensor("output.weight").is_none());
    assert_eq!(f.parameter_count(), 134_515_008);
    for i in 0..30 {
        assert!(
            f.tensor(&format!("blk.{i}.attn_q.weight")).is_some(),
            "block {i}"
        );
    }

    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.ty, GgmlType::Q8_0);
    assert_eq!(emb.dims, [576, 49152]);
    let bytes = f.tensor_bytes(&src, emb).unwrap();
    let row_bytes = emb.row_bytes().unwrap() as usize;
    let mut row = vec![0.0f32; emb.cols() as usize];
    let mut sum_abs = 0.0f64;
    for r in (0..emb.rows() as usize).step_by(97) {
        dequantize(emb.ty, &bytes[r * row_bytes..(r + 1) * row_bytes], &mut row).unwrap();
        assert!(row.iter().all(|v| v.is_finite()), "row {r}");
        sum_abs += row.iter().map(|v| f64::from(v.abs())).sum::<f64>();
    }
    assert!(sum_abs > 0.0);

    let q = f.tensor("blk.29.ffn_down.weight").unwrap();
    assert_eq!((q.ty, &q.dims[..]), (GgmlType::Q4_1, &[1536u64, 576][..]));
    let mut out = vec![0.0f32; q.n_elements() as usize];
    dequantize(q.ty, &f.tensor_bytes(&src, q).unwrap(), &mut out).unwrap();
    assert!(out.iter().all(|v| v.is_finite()));

    let ranged = GgufFile::read(&RangesOnly(&src)).unwrap();
    assert_eq!(ranged.tensors, f.tensors);
    assert_eq!(ranged.data_offset, f.data_offset);
    assert_eq!(ranged.metadata.len(), m.len());
    assert!(m.iter().zip(ranged.metadata.iter()).all(|(a, b)| a == b));

    // Every tensor in the file must be readable in full.
    for t in &f.tensors {
        assert_eq!(
            f.tensor_bytes(&src, t).unwrap().len() as u64,
            t.n_bytes(),
            "{}",
            t.name
        );
    }
}
