//! Shared helpers: a small valid file, byte patching, and a source without a slice view.
#![allow(dead_code)]

use lilypad_gguf::{
    ByteSource, GgmlType, GgufError, GgufFile, GgufWriter, Result, Value, quantize,
};

/// A source that only answers range reads, like the browser's HTTP fetcher.
pub struct Ranged(pub Vec<u8>);

impl ByteSource for Ranged {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.0.read_at(offset, buf)
    }
}

/// A small but complete model file: several value kinds and three tensors of three types.
pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()));
    w.metadata("llama.block_count", Value::U32(2));
    w.metadata("general.flag", Value::Bool(true));
    w.metadata(
        "tok.list",
        Value::Array(vec![Value::String("a".into()), Value::String("bc".into())]),
    );
    w.metadata(
        "tok.ids",
        Value::Array(vec![Value::I32(1), Value::I32(-2), Value::I32(3)]),
    );
    let data: Vec<f32> = (0..15).map(|i| i as f32 * 0.25 - 1.0).collect();
    w.tensor(
        "t.f32",
        &[5, 3],
        GgmlType::F32,
        quantize(GgmlType::F32, &data).unwrap(),
    )
    .unwrap();
    let q: Vec<f32> = (0..128).map(|i| ((i * 7) % 23) as f32 - 11.0).collect();
    w.tensor(
        "t.q4_0",
        &[64, 2],
        GgmlType::Q4_0,
        quantize(GgmlType::Q4_0, &q).unwrap(),
    )
    .unwrap();
    w.tensor(
        "t.q8_0",
        &[32],
        GgmlType::Q8_0,
        quantize(GgmlType::Q8_0, &q8_values()).unwrap(),
    )
    .unwrap();
    w
}

/// Integers with a largest magnitude of 127: the Q8_0 scale is exactly 1, so they survive.
pub fn q8_values() -> Vec<f32> {
    (0..32).map(|i| (i * 8) as f32 - 127.0).collect()
}

pub fn sample() -> Vec<u8> {
    sample_writer().to_bytes()
}

/// Position of the only occurrence of `needle`.
pub fn find(hay: &[u8], needle: &[u8]) -> usize {
    let mut hits = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i);
    let first = hits
        .next()
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(needle)));
    assert!(
        hits.next().is_none(),
        "{:?} occurs more than once",
        String::from_utf8_lossy(needle)
    );
    first
}

pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Byte positions of one tensor info's fields, found through its (unique) name.
pub struct InfoAt {
    pub name_len: usize,
    pub n_dims: usize,
    pub dims: usize,
    pub ty: usize,
    pub offset: usize,
}

pub fn tensor_info_at(b: &[u8], name: &str) -> InfoAt {
    let name_at = find(b, name.as_bytes());
    let n_dims = name_at + name.len();
    let nd = u32::from_le_bytes(b[n_dims..n_dims + 4].try_into().unwrap()) as usize;
    let dims = n_dims + 4;
    let ty = dims + 8 * nd;
    InfoAt {
        name_len: name_at - 8,
        n_dims,
        dims,
        ty,
        offset: ty + 4,
    }
}

/// Position of a metadata entry's type id, found through its (unique) key.
pub fn kv_type_at(b: &[u8], key: &str) -> usize {
    find(b, key.as_bytes()) + key.len()
}

pub fn read(b: &[u8]) -> Result<GgufFile> {
    GgufFile::read(&b)
}

/// Reads through both the slice and the ranged path and checks they agree.
pub fn read_both(b: &[u8]) -> Result<GgufFile> {
    let sliced = GgufFile::read(&b);
    let ranged = GgufFile::read(&Ranged(b.to_vec()));
    match (&sliced, &ranged) {
        (Ok(_), Ok(_)) => {}
        (Err(a), Err(e)) => assert_eq!(a.to_string(), e.to_string()),
        _ => panic!("slice and ranged reads disagree: {sliced:?} vs {ranged:?}"),
    }
    sliced
}

/// The error a hostile file must produce, with its message printed for the test log.
pub fn expect_err(b: &[u8]) -> GgufError {
    match read_both(b) {
        Ok(f) => panic!("hostile file was accepted: {} tensors", f.tensors.len()),
        Err(e) => {
            eprintln!("rejected: {e}");
            e
        }
    }
}
