//! Writer → reader round trips: every value type, every tensor type, alignment, v2 headers.

mod common;

use std::borrow::Cow;

use common::*;
use lilypad_gguf::{
    ByteSource, GgmlType, GgufError, GgufFile, GgufWriter, MmapSource, Value, dequantize,
};
use rand::{Rng, SeedableRng, rngs::StdRng};

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("v.u8", Value::U8(250)),
        ("v.i8", Value::I8(-120)),
        ("v.u16", Value::U16(65_000)),
        ("v.i16", Value::I16(-32_000)),
        ("v.u32", Value::U32(4_000_000_000)),
        ("v.i32", Value::I32(-2_000_000_000)),
        ("v.u64", Value::U64(u64::MAX)),
        ("v.i64", Value::I64(i64::MIN)),
        ("v.f32", Value::F32(-1.5e-7)),
        ("v.f64", Value::F64(std::f64::consts::PI)),
        ("v.true", Value::Bool(true)),
        ("v.false", Value::Bool(false)),
        ("v.str", Value::String("héllo ✓ \u{0}".into())),
        ("v.empty_str", Value::String(String::new())),
        ("v.empty_arr", Value::Array(vec![])),
        ("v.arr_u8", Value::Array(vec![Value::U8(1), Value::U8(2)])),
        (
            "v.arr_i64",
            Value::Array(vec![Value::I64(-1), Value::I64(1 << 40)]),
        ),
        ("v.arr_f64", Value::Array(vec![Value::F64(0.5)])),
        (
            "v.arr_bool",
            Value::Array(vec![Value::Bool(true), Value::Bool(false)]),
        ),
        (
            "v.arr_str",
            Value::Array(vec![
                Value::String("a".into()),
                Value::String(String::new()),
            ]),
        ),
        (
            "v.nested",
            Value::Array(vec![
                Value::Array(vec![Value::U16(1), Value::U16(2)]),
                Value::Array(vec![Value::String("x".into())]),
                Value::Array(vec![]),
                Value::Array(vec![Value::Array(vec![Value::F32(2.0)])]),
            ]),
        ),
    ]
}

#[test]
fn every_value_type_round_trips_in_order() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.metadata(k, v);
    }
    let f = read_both(&w.to_bytes()).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.metadata.len(), every_value().len());
    let got: Vec<(String, Value)> = f
        .metadata
        .iter()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    // Numeric and boolean arrays come back packed, an empty one as u8 (its written type).
    let want: Vec<(String, Value)> = every_value()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.packed()))
        .collect();
    assert_eq!(got, want);
    assert!(f.tensors.is_empty());
    // As in ggml, a file without tensors has no data section to align.
    assert!(f.data_offset <= f.file_len);
}

#[test]
fn every_tensor_type_round_trips() {
    let mut rng = StdRng::seed_from_u64(7);
    let mut w = GgufWriter::new();
    let mut expected = Vec::new();
    for (i, ty) in GgmlType::ALL.into_iter().enumerate() {
        let dims = [ty.block_size() * (i as u64 % 3 + 1), 3, 1 + i as u64 % 2];
        let n = (dims.iter().product::<u64>() / ty.block_size() * ty.type_size()) as usize;
        let data: Vec<u8> = (0..n).map(|_| rng.random()).collect();
        let name = format!("tensor.{}", ty.name());
        w.tensor(&name, &dims, ty, data.clone()).unwrap();
        expected.push((name, dims, ty, data));
    }
    let bytes = w.to_bytes();
    let ranged = Ranged(bytes.clone());
    let f = read_both(&bytes).unwrap();
    assert_eq!(f.tensors.len(), GgmlType::ALL.len());
    for (name, dims, ty, data) in &expected {
        let t = f.tensor(name).unwrap();
        assert_eq!((&t.dims[..], t.ty), (&dims[..], *ty));
        assert_eq!(t.offset % f.alignment, 0);
        assert_eq!(t.n_bytes(), data.len() as u64);
        assert_eq!(t.cols(), dims[0]);
        assert_eq!(t.rows(), dims[1] * dims[2]);
        let borrowed = f.tensor_bytes(&bytes, t).unwrap();
        assert!(
            matches!(borrowed, Cow::Borrowed(_)),
            "in-memory sources lend their bytes"
        );
        assert_eq!(&borrowed[..], &data[..]);
        let owned = f.tensor_bytes(&ranged, t).unwrap();
        assert!(matches!(owned, Cow::Owned(_)));
        assert_eq!(&owned[..], &data[..]);
    }
    let params: u64 = expected
        .iter()
        .map(|(_, d, _, _)| d.iter().product::<u64>())
        .sum();
    assert_eq!(f.parameter_count(), params);
    assert!(f.tensor("missing").is_none());
}

#[test]
fn custom_alignment_is_recorded_and_honoured() {
    let mut w = sample_writer().alignment(64);
    w.metadata("after", Value::U8(1));
    let f = read_both(&w.to_bytes()).unwrap();
    assert_eq!(f.alignment, 64);
    assert_eq!(f.metadata.u32("general.alignment").unwrap(), 64);
    assert_eq!(f.data_offset % 64, 0);
    for t in &f.tensors {
        assert_eq!(t.offset % 64, 0, "{}", t.name);
    }
    // The default is not written out.
    let f = read(&sample()).unwrap();
    assert!(f.metadata.get("general.alignment").is_none());
    assert_eq!(f.alignment, 32);
}

#[test]
fn version_2_header_parses() {
    let mut b = sample();
    put_u32(&mut b, 4, 2);
    let f = read_both(&b).unwrap();
    assert_eq!(f.version, 2);
    assert_eq!(f.metadata.architecture().unwrap(), "llama");
    assert_eq!(f.tensors.len(), 3);
}

#[test]
fn sample_contents_and_dequantized_tensors() {
    let b = sample();
    let f = read_both(&b).unwrap();
    let m = &f.metadata;
    assert_eq!(m.architecture().unwrap(), "llama");
    assert_eq!(m.u32("llama.block_count").unwrap(), 2);
    assert!(m.bool("general.flag").unwrap());
    assert_eq!(m.string_array("tok.list").unwrap(), ["a", "bc"]);
    assert_eq!(m.i32_array("tok.ids").unwrap(), [1, -2, 3]);
    assert_eq!(f.file_len, b.len() as u64);
    let names: Vec<&str> = f.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["t.f32", "t.q4_0", "t.q8_0"]);

    let t = f.tensor("t.f32").unwrap();
    let mut out = vec![0.0; t.n_elements() as usize];
    dequantize(t.ty, &f.tensor_bytes(&b, t).unwrap(), &mut out).unwrap();
    assert_eq!(
        out,
        (0..15).map(|i| i as f32 * 0.25 - 1.0).collect::<Vec<_>>()
    );

    let t = f.tensor("t.q8_0").unwrap();
    let mut out = vec![0.0; 32];
    dequantize(t.ty, &f.tensor_bytes(&b, t).unwrap(), &mut out).unwrap();
    assert_eq!(out, q8_values());
}

#[test]
fn tensor_bytes_checks_the_source() {
    let b = sample();
    let f = read(&b).unwrap();
    let t = f.tensor("t.q8_0").unwrap().clone();
    let short = &b[..t.offset as usize + 10];
    let e = f.tensor_bytes(&short, &t).unwrap_err();
    assert!(matches!(e.root(), GgufError::DataPastEnd { .. }));
    assert!(e.to_string().contains("t.q8_0"), "{e}");
    let e = f.tensor_bytes(&Ranged(short.to_vec()), &t).unwrap_err();
    assert!(matches!(e.root(), GgufError::DataPastEnd { .. }));
}

#[test]
fn writer_checks_data_length() {
    let mut w = GgufWriter::new();
    let e = w
        .tensor("w", &[32, 2], GgmlType::Q8_0, vec![0; 67])
        .unwrap_err();
    assert!(
        matches!(
            e,
            GgufError::DataLength {
                expected: 68,
                got: 67,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("\"w\""));
    let e = w
        .tensor("w", &[33], GgmlType::Q8_0, vec![0; 34])
        .unwrap_err();
    assert!(
        matches!(e.root(), GgufError::NotBlockMultiple { .. }),
        "{e}"
    );
    let e = w
        .tensor("w", &[u64::MAX, 2], GgmlType::F32, vec![])
        .unwrap_err();
    assert!(
        matches!(e.root(), GgufError::ElementCountOverflow { .. }),
        "{e}"
    );
}

#[test]
#[should_panic(expected = "one element type")]
fn writer_rejects_mixed_arrays() {
    GgufWriter::new().metadata("mixed", Value::Array(vec![Value::U8(1), Value::I8(1)]));
}

#[test]
fn mmap_source_reads_files() {
    let path = std::env::temp_dir().join(format!("lilypad-gguf-test-{}.gguf", std::process::id()));
    let bytes = sample();
    std::fs::write(&path, &bytes).unwrap();
    let src = MmapSource::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(src.len(), bytes.len() as u64);
    let f = GgufFile::read(&src).unwrap();
    let t = f.tensor("t.q4_0").unwrap();
    let data = f.tensor_bytes(&src, t).unwrap();
    assert!(matches!(data, Cow::Borrowed(_)));
    assert_eq!(
        &data[..],
        &bytes[t.offset as usize..(t.offset + t.n_bytes()) as usize]
    );

    let e = MmapSource::open("/nonexistent/model.gguf").unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
}

/// A streamed file with declared tensors equals the in-memory one with the same bytes, and a
/// fill of the wrong length is an error, not a corrupt file.
#[test]
fn streamed_file_equals_the_in_memory_one() {
    let a: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b: Vec<u8> = (0..34u8).collect();
    let mut whole = GgufWriter::new().alignment(64);
    let mut streamed = GgufWriter::new().alignment(64);
    whole.metadata("general.architecture", Value::String("test".into()));
    streamed.metadata("general.architecture", Value::String("test".into()));
    whole
        .tensor("a", &[8, 8], GgmlType::F32, a.clone())
        .unwrap();
    streamed.tensor("a", &[8, 8], GgmlType::F32, a).unwrap();
    whole.tensor("b", &[32], GgmlType::Q8_0, b.clone()).unwrap();
    streamed.declare_tensor("b", &[32], GgmlType::Q8_0).unwrap();
    let mut out = Vec::new();
    streamed
        .write_to(&mut out, &mut |name, len| {
            assert_eq!((name, len), ("b", 34));
            b.clone()
        })
        .unwrap();
    assert_eq!(out, whole.to_bytes());
    let file = GgufFile::read(&out).unwrap();
    assert_eq!(
        file.tensor_bytes(&out, file.tensor("b").unwrap()).unwrap(),
        &b[..]
    );
    let err = streamed.write_to(&mut Vec::new(), &mut |_, _| vec![0; 3]);
    assert_eq!(err.unwrap_err().kind(), std::io::ErrorKind::InvalidData);
}
