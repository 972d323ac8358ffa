//! Broken and malicious files: each must be rejected with an error naming the problem,
//! never a panic, and never an allocation sized by an unchecked header field.

mod common;

use common::*;
use lilypad_gguf::{
    GgmlType, GgufError, GgufWriter, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_METADATA_BYTES,
    MAX_STRING_LEN, Packed, Value,
};
use rand::{Rng, SeedableRng, rngs::StdRng};

/// Where the last tensor's data ends: only the padding after it may be cut off.
fn data_end(f: &lilypad_gguf::GgufFile) -> usize {
    f.tensors
        .iter()
        .map(|t| t.offset + t.n_bytes())
        .max()
        .unwrap() as usize
}

#[test]
fn every_truncation_is_an_error() {
    let full = sample();
    let f = read_both(&full).unwrap();
    let data_end = data_end(&f);
    for len in 0..data_end {
        let e = expect_err(&full[..len]);
        assert!(
            matches!(
                e.root(),
                GgufError::Truncated { .. }
                    | GgufError::DataPastEnd { .. }
                    | GgufError::CountTooLarge { .. }
                    | GgufError::ArrayPastEnd { .. }
            ),
            "prefix {len}: unexpected {e}"
        );
    }
    // Only the zero padding after the last tensor may be cut off.
    for len in data_end..=full.len() {
        read_both(&full[..len]).unwrap();
    }
}

#[test]
fn random_corruption_never_panics() {
    let full = sample();
    let mut rng = StdRng::seed_from_u64(0x6767_7566);
    let header_end = read(&full).unwrap().data_offset as usize;
    for _ in 0..3000 {
        let mut b = full.clone();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..header_end);
            b[at] = match rng.random_range(0..4) {
                0 => 0xFF,
                1 => 0,
                2 => b[at] ^ (1 << rng.random_range(0..8)),
                _ => rng.random(),
            };
        }
        let _ = read_both(&b);
    }
}

#[test]
fn wrong_magic() {
    let mut b = sample();
    b[..4].copy_from_slice(b"GGML");
    let e = expect_err(&b);
    assert!(matches!(e, GgufError::BadMagic { found } if &found == b"GGML"));
    assert!(e.to_string().contains("GGML"));
}

#[test]
fn unsupported_versions() {
    for v in [0u32, 1, 4, 0x0300_0000] {
        let mut b = sample();
        put_u32(&mut b, 4, v);
        let e = expect_err(&b);
        assert!(matches!(e, GgufError::UnsupportedVersion { version } if version == v));
        assert!(e.to_string().contains(&v.to_string()));
    }
    let mut b = sample();
    put_u32(&mut b, 4, 0x0300_0000);
    assert!(expect_err(&b).to_string().contains("big-endian"));
}

#[test]
fn header_counts_larger_than_the_file() {
    for (at, what) in [(8, "tensors"), (16, "metadata entries")] {
        for n in [u64::MAX, 1 << 40, 10_000] {
            let mut b = sample();
            put_u64(&mut b, at, n);
            let e = expect_err(&b);
            assert!(
                matches!(e, GgufError::CountTooLarge { what: w, count, .. } if w == what && count == n),
                "{e}"
            );
        }
    }
}

#[test]
fn absurd_string_lengths() {
    // Key length over the cap.
    let mut b = sample();
    let len_at = find(&b, b"general.architecture") - 8;
    put_u64(&mut b, len_at, u64::MAX);
    let e = expect_err(&b);
    assert!(
        matches!(e.root(), GgufError::StringTooLong { len: u64::MAX, limit, .. } if *limit == MAX_STRING_LEN)
    );
    assert!(e.to_string().contains("metadata entry #0 key"), "{e}");

    // Under the cap but longer than the rest of the file.
    put_u64(&mut b, len_at, 1 << 20);
    assert!(
        matches!(expect_err(&b).root(), GgufError::Truncated { needed, .. } if *needed == 1 << 20)
    );

    // A string value.
    let mut b = sample();
    let v_at = kv_type_at(&b, "general.architecture") + 4;
    put_u64(&mut b, v_at, MAX_STRING_LEN + 1);
    let e = expect_err(&b);
    assert!(matches!(e.root(), GgufError::StringTooLong { .. }));
    assert!(e.to_string().contains("general.architecture"), "{e}");

    // A tensor name.
    let mut b = sample();
    let at = tensor_info_at(&b, "t.q4_0");
    put_u64(&mut b, at.name_len, u64::MAX - 3);
    let e = expect_err(&b);
    assert!(matches!(e.root(), GgufError::StringTooLong { .. }));
    assert!(e.to_string().contains("tensor #1 name"), "{e}");
}

#[test]
fn absurd_array_lengths() {
    let count_at = |b: &[u8], key: &str| kv_type_at(b, key) + 4 + 4;

    let mut b = sample();
    let at = count_at(&b, "tok.ids");
    put_u64(&mut b, at, u64::MAX);
    let e = expect_err(&b);
    assert!(matches!(
        e.root(),
        GgufError::ArrayTooLong { len: u64::MAX, .. }
    ));
    assert!(e.to_string().contains("tok.ids"), "{e}");

    // Under the cap, but 4-byte elements cannot fit in what is left.
    put_u64(&mut b, at, MAX_ARRAY_LEN - 1);
    let e = expect_err(&b);
    assert!(
        matches!(e.root(), GgufError::ArrayPastEnd { len, elem: "i32", needed, remaining, .. }
            if *len == MAX_ARRAY_LEN - 1 && *needed == len * 4 && needed > remaining),
        "{e}"
    );

    // Strings take at least their 8-byte length each.
    let mut b = sample();
    let at = count_at(&b, "tok.list");
    put_u64(&mut b, at, 1 << 20);
    assert!(matches!(
        expect_err(&b).root(),
        GgufError::ArrayPastEnd {
            elem: "strings",
            ..
        }
    ));
}

#[test]
fn large_numeric_arrays_take_their_own_size() {
    // Four arrays of 2^24 u8: 2.2 GB in memory when each element was a whole Value.
    let n = MAX_ARRAY_LEN as usize;
    let mut w = GgufWriter::new();
    for key in ["a", "b", "c", "d"] {
        w.metadata(key, Value::Packed(Packed::U8(vec![3; n])));
    }
    let f = read_both(&w.to_bytes()).unwrap();
    let bytes: usize = ["a", "b", "c", "d"]
        .iter()
        .map(|k| match f.metadata.get(k) {
            Some(Value::Packed(p)) => p.bytes(),
            other => panic!("{k}: {other:?}"),
        })
        .sum();
    assert_eq!(bytes, 4 * n);
}

#[test]
fn metadata_over_the_memory_budget_is_refused() {
    // Nine million empty strings: 72 MB of file, but 288 MB once each is a Value.
    let mut w = GgufWriter::new();
    w.metadata(
        "tokenizer.ggml.tokens",
        Value::Array(vec![Value::String(String::new()); 9_000_000]),
    );
    let e = expect_err(&w.to_bytes());
    assert!(
        matches!(e.root(), GgufError::MetadataTooLarge { limit, .. } if *limit == MAX_METADATA_BYTES),
        "{e}"
    );
    assert!(e.to_string().contains("tokenizer.ggml.tokens"), "{e}");
}

fn nested(depth: usize) -> Value {
    (0..depth).fold(Value::U8(7), |v, _| Value::Array(vec![v]))
}

#[test]
fn nesting_limit() {
    let mut w = GgufWriter::new();
    w.metadata("deep", nested(MAX_ARRAY_DEPTH));
    let f = read_both(&w.to_bytes()).unwrap();
    assert_eq!(
        f.metadata.get("deep"),
        Some(&nested(MAX_ARRAY_DEPTH).packed())
    );

    let mut w = GgufWriter::new();
    w.metadata("deep", nested(MAX_ARRAY_DEPTH + 1));
    let e = expect_err(&w.to_bytes());
    assert!(matches!(e.root(), GgufError::NestingTooDeep { limit } if *limit == MAX_ARRAY_DEPTH));
    assert!(e.to_string().contains("deep"), "{e}");

    // A hand-made chain of a million "array of array" headers must not recurse without bound.
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(b'k');
    b.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..1_000_000 {
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
    }
    assert!(matches!(
        expect_err(&b).root(),
        GgufError::NestingTooDeep { .. }
    ));
}

#[test]
fn bad_dimension_counts() {
    for dims in [vec![], vec![1u64; MAX_DIMS as usize + 1]] {
        let mut w = GgufWriter::new();
        w.tensor("weird", &dims, GgmlType::F32, vec![0; 4]).unwrap();
        let e = expect_err(&w.to_bytes());
        assert!(
            matches!(e.root(), GgufError::BadDimCount { n_dims, max: 4 } if *n_dims as usize == dims.len())
        );
        assert!(e.to_string().contains("\"weird\""), "{e}");
    }
    let mut b = sample();
    let at = tensor_info_at(&b, "t.f32");
    put_u32(&mut b, at.n_dims, u32::MAX);
    assert!(matches!(
        expect_err(&b).root(),
        GgufError::BadDimCount {
            n_dims: u32::MAX,
            ..
        }
    ));
}

#[test]
fn zero_and_enormous_dims() {
    let mut w = GgufWriter::new();
    w.tensor("empty", &[4, 0], GgmlType::F32, vec![]).unwrap();
    let e = expect_err(&w.to_bytes());
    assert!(
        matches!(e.root(), GgufError::BadDim { index: 1, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("\"empty\""), "{e}");

    for huge in [u64::MAX, 1 << 63] {
        let mut b = sample();
        let at = tensor_info_at(&b, "t.f32");
        put_u64(&mut b, at.dims + 8, huge);
        assert!(matches!(
            expect_err(&b).root(),
            GgufError::BadDim { index: 1, .. }
        ));
    }

    // A legal dimension that is simply far bigger than the file.
    let mut b = sample();
    let at = tensor_info_at(&b, "t.f32");
    put_u64(&mut b, at.dims + 8, 1 << 40);
    let e = expect_err(&b);
    assert!(matches!(e.root(), GgufError::DataPastEnd { .. }), "{e}");
    assert!(e.to_string().contains("t.f32"), "{e}");
}

#[test]
fn element_count_overflow() {
    let mut w = GgufWriter::new();
    w.tensor("big", &[1, 1, 1], GgmlType::F32, vec![0; 4])
        .unwrap();
    for dims in [
        [1u64 << 32, 1 << 32, 1 << 32],
        [1 << 31, 1 << 31, 2],
        [3, 1 << 62, 1],
    ] {
        let mut b = w.to_bytes();
        let at = tensor_info_at(&b, "big");
        for (i, d) in dims.into_iter().enumerate() {
            put_u64(&mut b, at.dims + 8 * i, d);
        }
        let e = expect_err(&b);
        assert!(
            matches!(e.root(), GgufError::ElementCountOverflow { .. }),
            "{dims:?}: {e}"
        );
        assert!(e.to_string().contains("big"), "{e}");
    }
}

#[test]
fn row_not_a_whole_number_of_blocks() {
    let mut b = sample();
    let at = tensor_info_at(&b, "t.q4_0");
    put_u64(&mut b, at.dims, 48);
    let e = expect_err(&b);
    assert!(
        matches!(
            e.root(),
            GgufError::NotBlockMultiple {
                ty: GgmlType::Q4_0,
                elements: 48,
                block_size: 32
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("t.q4_0"), "{e}");
}

#[test]
fn unknown_tensor_type() {
    for id in [4u32, 31, 36, 40, 1000, u32::MAX] {
        let mut b = sample();
        let at = tensor_info_at(&b, "t.q8_0");
        put_u32(&mut b, at.ty, id);
        let e = expect_err(&b);
        assert!(
            matches!(e.root(), GgufError::UnknownType { id: i } if *i == id),
            "{e}"
        );
        assert!(e.to_string().contains("t.q8_0"), "{e}");
    }
}

#[test]
fn misaligned_offset() {
    let mut b = sample();
    let at = tensor_info_at(&b, "t.q4_0");
    let off = get_u64(&b, at.offset);
    put_u64(&mut b, at.offset, off + 2);
    let e = expect_err(&b);
    assert!(
        matches!(e.root(), GgufError::Misaligned { alignment: 32, offset } if *offset == off + 2),
        "{e}"
    );
    assert!(e.to_string().contains("t.q4_0"), "{e}");
}

#[test]
fn data_past_end_of_file() {
    for off in [1u64 << 20, u64::MAX - 31] {
        let mut b = sample();
        let at = tensor_info_at(&b, "t.q8_0");
        put_u64(&mut b, at.offset, off);
        let e = expect_err(&b);
        assert!(
            matches!(e.root(), GgufError::DataPastEnd { file_len, .. } if *file_len == b.len() as u64),
            "{e}"
        );
        assert!(e.to_string().contains("t.q8_0"), "{e}");
    }
}

#[test]
fn overlapping_tensors() {
    // t.f32 takes 60 bytes at relative offset 0; moving t.q4_0 to 32 lands inside it.
    let mut b = sample();
    let at = tensor_info_at(&b, "t.q4_0");
    put_u64(&mut b, at.offset, 32);
    let e = expect_err(&b);
    assert!(
        matches!(e.root(), GgufError::Overlap { a, b, .. } if a == "t.f32" && b == "t.q4_0"),
        "{e}"
    );

    let mut b = sample();
    let at = tensor_info_at(&b, "t.q8_0");
    put_u64(&mut b, at.offset, 0);
    assert!(matches!(expect_err(&b).root(), GgufError::Overlap { .. }));
}

#[test]
fn duplicate_names() {
    let mut w = GgufWriter::new();
    w.tensor("dup.a", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    w.tensor("dup.b", &[1], GgmlType::F32, vec![0; 4]).unwrap();
    assert!(matches!(
        w.tensor("dup.a", &[1], GgmlType::F32, vec![0; 4]),
        Err(GgufError::DuplicateTensor { .. })
    ));
    let mut b = w.to_bytes();
    let at = find(&b, b"dup.b");
    b[at + 4] = b'a';
    let e = expect_err(&b);
    assert!(
        matches!(&e, GgufError::DuplicateTensor { name } if name == "dup.a"),
        "{e}"
    );

    let mut w = GgufWriter::new();
    w.metadata("key.a", Value::U8(1));
    w.metadata("key.b", Value::U8(2));
    let mut b = w.to_bytes();
    let at = find(&b, b"key.b");
    b[at + 4] = b'a';
    assert!(matches!(expect_err(&b), GgufError::DuplicateKey { key } if key == "key.a"));
}

#[test]
fn empty_key() {
    let mut w = GgufWriter::new();
    w.metadata("ok", Value::U8(1));
    w.metadata("", Value::U8(1));
    assert!(matches!(
        expect_err(&w.to_bytes()),
        GgufError::EmptyKey { index: 1 }
    ));
}

#[test]
fn bad_alignment_values() {
    for a in [0u32, 3, 48, 0x8000_0001] {
        let mut w = sample_writer();
        w.metadata("general.alignment", Value::U32(a));
        let e = expect_err(&w.to_bytes());
        assert!(
            matches!(e, GgufError::BadAlignment { alignment } if alignment == u64::from(a)),
            "{e}"
        );
    }
    let mut w = sample_writer();
    w.metadata("general.alignment", Value::U64(32));
    let e = expect_err(&w.to_bytes());
    assert!(
        matches!(
            e,
            GgufError::WrongType {
                expected: "u32",
                got: "u64",
                ..
            }
        ),
        "{e}"
    );

    // A legal but enormous alignment pushes the data section past the end of the file.
    let mut w = sample_writer();
    w.metadata("general.alignment", Value::U32(1 << 31));
    assert!(matches!(
        expect_err(&w.to_bytes()).root(),
        GgufError::Truncated { .. }
    ));
}

#[test]
fn invalid_utf8() {
    let mut b = sample();
    let at = find(&b, b"general.flag");
    b[at + 8] = 0xFF;
    let e = expect_err(&b);
    assert!(
        matches!(e.root(), GgufError::InvalidUtf8 { offset, .. } if *offset == at as u64),
        "{e}"
    );

    let mut b = sample();
    let at = kv_type_at(&b, "general.architecture") + 4 + 8;
    assert_eq!(&b[at..at + 5], b"llama");
    b[at + 1] = 0xC0;
    let e = expect_err(&b);
    assert!(matches!(e.root(), GgufError::InvalidUtf8 { .. }));
    assert!(e.to_string().contains("general.architecture"), "{e}");

    let mut b = sample();
    let at = find(&b, b"bc");
    b[at] = 0xE2;
    let e = expect_err(&b);
    assert!(
        e.to_string().contains("tok.list") && e.to_string().contains("array element 1"),
        "{e}"
    );

    let mut b = sample();
    let at = find(&b, b"t.q8_0");
    b[at + 5] = 0x80;
    assert!(matches!(
        expect_err(&b).root(),
        GgufError::InvalidUtf8 { .. }
    ));
}

#[test]
fn unknown_value_types_and_bad_bools() {
    let mut b = sample();
    let at = kv_type_at(&b, "llama.block_count");
    put_u32(&mut b, at, 13);
    let e = expect_err(&b);
    assert!(
        matches!(e.root(), GgufError::UnknownValueType { id: 13, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("llama.block_count"), "{e}");

    let mut b = sample();
    let at = kv_type_at(&b, "tok.ids");
    put_u32(&mut b, at + 4, 99);
    assert!(matches!(
        expect_err(&b).root(),
        GgufError::UnknownValueType { id: 99, .. }
    ));

    let mut b = sample();
    let at = kv_type_at(&b, "general.flag");
    b[at + 4] = 2;
    assert!(matches!(
        expect_err(&b).root(),
        GgufError::InvalidBool { value: 2, .. }
    ));
}

/// K-quant tensors (256-weight super-blocks): data cut anywhere short of the last block, and
/// rows that do not fill whole super-blocks, are refused with typed errors naming the tensor.
#[test]
fn k_quant_tensors_truncated_or_partial() {
    let types = [
        ("t.q4_k", GgmlType::Q4K),
        ("t.q5_k", GgmlType::Q5K),
        ("t.q6_k", GgmlType::Q6K),
    ];
    let mut w = GgufWriter::new();
    w.metadata("general.architecture", Value::String("llama".into()));
    let x: Vec<f32> = (0..512)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    for (name, ty) in types {
        w.tensor(name, &[256, 2], ty, lilypad_gguf::quantize(ty, &x).unwrap())
            .unwrap();
    }
    let full = w.to_bytes();
    let f = read_both(&full).unwrap();
    for (name, ty) in types {
        let t = f.tensor(name).unwrap();
        assert_eq!((t.ty, t.n_bytes()), (ty, 2 * ty.type_size()));
        let mut y = vec![0f32; 512];
        lilypad_gguf::dequantize(ty, &f.tensor_bytes(&full, t).unwrap(), &mut y).unwrap();
    }
    let data_end = data_end(&f);
    for len in f.data_offset as usize..data_end {
        let e = expect_err(&full[..len]);
        assert!(
            matches!(
                e.root(),
                GgufError::DataPastEnd { .. } | GgufError::Truncated { .. }
            ),
            "prefix {len}: unexpected {e}"
        );
    }
    for (name, ty) in types {
        // 128 x 4 takes the same bytes as 256 x 2 but splits super-blocks across rows.
        let mut b = full.clone();
        let at = tensor_info_at(&b, name);
        put_u64(&mut b, at.dims, 128);
        put_u64(&mut b, at.dims + 8, 4);
        let e = expect_err(&b);
        assert!(
            matches!(
                e.root(),
                GgufError::NotBlockMultiple { ty: t, elements: 128, block_size: 256 } if *t == ty
            ),
            "{e}"
        );
        assert!(e.to_string().contains(name), "{e}");
    }
}
