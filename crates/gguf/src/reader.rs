use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::ResultExt;
use crate::{ByteSource, GgmlType, GgufError, Metadata, Packed, Result, Value};

/// File magic, the first four bytes of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest accepted string (keys, names, values). Real chat templates are ~100 KiB.
pub const MAX_STRING_LEN: u64 = 64 << 20;
/// Most elements in one metadata array. Vocabularies hold a few hundred thousand entries.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Most memory the metadata may take once read, all keys, strings and arrays together.
/// The largest real vocabularies (262k tokens and their merges) take about 20 MiB.
pub const MAX_METADATA_BYTES: u64 = 256 << 20;
/// Deepest nesting of metadata arrays (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: usize = 4;
/// ggml tensors have at most four dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// ggml counts elements in `int64_t`, so no dimension or element count may exceed this.
pub const MAX_ELEMENTS: u64 = i64::MAX as u64;

/// Lower bounds on encoded sizes, used to reject header counts before allocating for them.
/// A metadata entry: key length (8) + at least one key byte + value type (4) + a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// A tensor info: name length (8) + n_dims (4) + one dimension (8) + type (4) + offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Header counts are trusted for preallocation only up to this many entries.
const PREALLOC_CAP: usize = 1024;

/// Where a tensor lives and how to read it. `dims` is in ggml order: `dims[0]` is the
/// contiguous (column) dimension, so a `[rows, cols]` matrix is stored as `dims = [cols, rows]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Absolute byte offset in the file (the data section start is already added).
    pub offset: u64,
}

impl TensorInfo {
    /// Saturates instead of overflowing: tensors from [`GgufFile::read`] are validated, but
    /// this type is public and may be built by hand.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }

    pub fn n_bytes(&self) -> u64 {
        (self.n_elements() / self.ty.block_size()).saturating_mul(self.ty.type_size())
    }

    /// Product of `dims[1..]`: how many rows of `cols()` elements the tensor holds.
    pub fn rows(&self) -> u64 {
        self.dims
            .iter()
            .skip(1)
            .fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// `dims[0]`, the contiguous dimension.
    pub fn cols(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Bytes of one row of `cols()` elements.
    pub fn row_bytes(&self) -> Result<u64> {
        self.ty.row_bytes(self.cols())
    }
}

/// Byte size of a tensor of this shape and type, every step checked.
pub(crate) fn checked_n_bytes(dims: &[u64], ty: GgmlType) -> Result<u64> {
    let n = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or_else(|| GgufError::ElementCountOverflow {
            dims: dims.to_vec(),
            max: u64::MAX,
        })?;
    let cols = dims.first().copied().unwrap_or(1);
    let block_size = ty.block_size();
    if !cols.is_multiple_of(block_size) {
        return Err(GgufError::NotBlockMultiple {
            ty,
            elements: cols,
            block_size,
        });
    }
    (n / block_size)
        .checked_mul(ty.type_size())
        .ok_or(GgufError::SizeOverflow { ty, elements: n })
}

pub(crate) fn align_up(x: u64, alignment: u64) -> Option<u64> {
    x.checked_next_multiple_of(alignment)
}

/// A parsed and validated GGUF header. Tensor data stays in the [`ByteSource`]; fetch it
/// with [`GgufFile::tensor_bytes`].
#[derive(Clone, Debug)]
pub struct GgufFile {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section: the header end rounded up to `alignment`
    /// (as in ggml, a file without tensors gets no padding and this is the header end).
    pub data_offset: u64,
    pub file_len: u64,
    index: HashMap<String, usize>,
}

impl GgufFile {
    /// Parses and validates the whole header: every count, length, shape, type id, offset
    /// and alignment is checked against the file size and ggml's limits before use, so a
    /// hostile file yields an error, never a panic or a huge allocation.
    pub fn read(src: &dyn ByteSource) -> Result<GgufFile> {
        let mut c = Cursor::new(src);
        let file_len = c.len;

        let magic: [u8; 4] = c.array().context(|| "magic".into())?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = c.u32().context(|| "version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        // v1 used 32-bit counts and lengths; v2 and v3 share one layout (v3 only added
        // big-endian files, which the version check above already rejects).
        let n_tensors = c.u64().context(|| "tensor count".into())?;
        let n_kv = c.u64().context(|| "metadata count".into())?;
        c.check_count("metadata entries", n_kv, MIN_KV_BYTES)?;
        c.check_count("tensors", n_tensors, MIN_TENSOR_INFO_BYTES)?;

        let mut metadata = Metadata::new();
        for i in 0..n_kv {
            let key = c.string().context(|| format!("metadata entry #{i} key"))?;
            if key.is_empty() {
                return Err(GgufError::EmptyKey { index: i });
            }
            if metadata.contains_key(&key) {
                return Err(GgufError::DuplicateKey { key });
            }
            let value = c
                .u32()
                .and_then(|ty| c.value(ty, 0))
                .context(|| format!("metadata key {key:?}"))?;
            metadata.insert(key, value);
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(&Value::U32(a)) if a.is_power_of_two() => a.into(),
            Some(&Value::U32(a)) => {
                return Err(GgufError::BadAlignment {
                    alignment: a.into(),
                });
            }
            Some(v) => {
                return Err(GgufError::WrongType {
                    key: "general.alignment".into(),
                    expected: "u32",
                    got: v.type_name(),
                });
            }
        };

        let mut tensors = Vec::with_capacity(
            usize::try_from(n_tensors)
                .unwrap_or(usize::MAX)
                .min(PREALLOC_CAP),
        );
        let mut index = HashMap::with_capacity(tensors.capacity());
        for i in 0..n_tensors {
            let name = c.string().context(|| format!("tensor #{i} name"))?;
            if index.contains_key(&name) {
                return Err(GgufError::DuplicateTensor { name });
            }
            let info = c
                .tensor_info(name)
                .map_err(|(name, e)| GgufError::Context {
                    what: format!("tensor #{i} {name:?}"),
                    source: Box::new(e),
                })?;
            index.insert(info.name.clone(), tensors.len());
            tensors.push(info);
        }

        // As in ggml, the data section only gets its alignment padding when there is data.
        let header_end = c.pos;
        let data_offset = if tensors.is_empty() {
            header_end
        } else {
            let aligned = align_up(header_end, alignment).unwrap_or(u64::MAX);
            if aligned > file_len {
                return Err(GgufError::Truncated {
                    offset: header_end,
                    needed: aligned - header_end,
                    len: file_len,
                })
                .context(|| "padding before the data section".into());
            }
            aligned
        };

        for t in &mut tensors {
            let relative = t.offset;
            let placed = if !relative.is_multiple_of(alignment) {
                Err(GgufError::Misaligned {
                    offset: relative,
                    alignment,
                })
            } else {
                let n_bytes = t.n_bytes();
                match data_offset.checked_add(relative) {
                    Some(start)
                        if start
                            .checked_add(n_bytes)
                            .is_some_and(|end| end <= file_len) =>
                    {
                        Ok(start)
                    }
                    _ => Err(GgufError::DataPastEnd {
                        start: data_offset.saturating_add(relative),
                        end: data_offset.saturating_add(relative).saturating_add(n_bytes),
                        file_len,
                    }),
                }
            };
            t.offset =
                placed.context(|| format!("tensor {:?} (relative offset {relative})", t.name))?;
        }

        let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
        by_offset.sort_by_key(|t| t.offset);
        for pair in by_offset.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let a_end = a.offset + a.n_bytes();
            if b.offset < a_end {
                return Err(GgufError::Overlap {
                    a: a.name.clone(),
                    a_start: a.offset,
                    a_end,
                    b: b.name.clone(),
                    b_start: b.offset,
                    b_end: b.offset + b.n_bytes(),
                });
            }
        }

        Ok(GgufFile {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
            file_len,
            index,
        })
    }

    /// Looks a tensor up by name in O(1).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        match self.index.get(name).and_then(|&i| self.tensors.get(i)) {
            Some(t) if t.name == name => Some(t),
            // `tensors` is public and may have been edited since parsing.
            _ => self.tensors.iter().find(|t| t.name == name),
        }
    }

    /// A tensor's raw bytes: borrowed when the source is in memory, otherwise read.
    pub fn tensor_bytes<'a>(
        &self,
        src: &'a dyn ByteSource,
        t: &TensorInfo,
    ) -> Result<Cow<'a, [u8]>> {
        let len = checked_n_bytes(&t.dims, t.ty).context(|| format!("tensor {:?}", t.name))?;
        let file_len = src.len();
        let past_end = || GgufError::Context {
            what: format!("tensor {:?}", t.name),
            source: Box::new(GgufError::DataPastEnd {
                start: t.offset,
                end: t.offset.saturating_add(len),
                file_len,
            }),
        };
        let end = t
            .offset
            .checked_add(len)
            .filter(|&e| e <= file_len)
            .ok_or_else(past_end)?;
        if let Some(slice) = src.as_slice() {
            let range = (usize::try_from(t.offset).ok(), usize::try_from(end).ok());
            if let (Some(a), Some(b)) = range {
                return slice.get(a..b).map(Cow::Borrowed).ok_or_else(past_end);
            }
        }
        let n = usize::try_from(len).map_err(|_| GgufError::TooLarge { bytes: len })?;
        let mut buf = vec![0u8; n];
        src.read_at(t.offset, &mut buf)?;
        Ok(Cow::Owned(buf))
    }

    /// Total elements over all tensors.
    pub fn parameter_count(&self) -> u64 {
        self.tensors
            .iter()
            .map(TensorInfo::n_elements)
            .fold(0, u64::saturating_add)
    }
}

/// Sequential reader over a [`ByteSource`]. Sources without a slice view (HTTP ranges) are
/// read in chunks, so parsing a header costs a few range requests rather than thousands.
struct Cursor<'a> {
    src: &'a dyn ByteSource,
    slice: Option<&'a [u8]>,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    /// Memory the metadata read so far takes, against [`MAX_METADATA_BYTES`].
    metadata_bytes: u64,
}

const CHUNK: u64 = 256 << 10;

impl<'a> Cursor<'a> {
    fn new(src: &'a dyn ByteSource) -> Self {
        let slice = src.as_slice();
        let len = slice.map_or_else(|| src.len(), |s| s.len() as u64);
        Self {
            src,
            slice,
            len,
            pos: 0,
            buf: Vec::new(),
            buf_start: 0,
            metadata_bytes: 0,
        }
    }

    fn remaining(&self) -> u64 {
        self.len - self.pos
    }

    fn ensure(&self, n: u64) -> Result<()> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos,
                needed: n,
                len: self.len,
            });
        }
        Ok(())
    }

    fn read_into(&mut self, out: &mut [u8]) -> Result<()> {
        let n = out.len() as u64;
        self.ensure(n)?;
        if let Some(s) = self.slice {
            // In range: `ensure` bounded pos + n by the slice length.
            let start = self.pos as usize;
            out.copy_from_slice(&s[start..start + out.len()]);
        } else {
            let buf_end = self.buf_start + self.buf.len() as u64;
            if self.pos < self.buf_start || self.pos + n > buf_end {
                if n >= CHUNK {
                    self.src.read_at(self.pos, out)?;
                    self.pos += n;
                    return Ok(());
                }
                let take = CHUNK.min(self.remaining()) as usize;
                self.buf.resize(take, 0);
                self.src.read_at(self.pos, &mut self.buf)?;
                self.buf_start = self.pos;
            }
            let at = (self.pos - self.buf_start) as usize;
            out.copy_from_slice(&self.buf[at..at + out.len()]);
        }
        self.pos += n;
        Ok(())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.read_into(&mut b)?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }

    /// Rejects a count of items that could not fit in the rest of the file.
    fn check_count(&self, what: &'static str, count: u64, min_bytes: u64) -> Result<()> {
        let max = self.remaining() / min_bytes;
        if count > max {
            return Err(GgufError::CountTooLarge {
                what,
                count,
                max,
                remaining: self.remaining(),
                offset: self.pos,
            });
        }
        Ok(())
    }

    /// Counts `bytes` of memory against the metadata budget, before they are allocated.
    fn charge(&mut self, bytes: u64) -> Result<()> {
        self.metadata_bytes = self.metadata_bytes.saturating_add(bytes);
        if self.metadata_bytes > MAX_METADATA_BYTES {
            return Err(GgufError::MetadataTooLarge {
                limit: MAX_METADATA_BYTES,
                offset: self.pos,
            });
        }
        Ok(())
    }

    fn string(&mut self) -> Result<String> {
        let len = self.u64()?;
        let offset = self.pos;
        if len > MAX_STRING_LEN {
            return Err(GgufError::StringTooLong {
                offset,
                len,
                limit: MAX_STRING_LEN,
            });
        }
        self.ensure(len)?;
        self.charge(len)?;
        let mut bytes = vec![0u8; len as usize];
        self.read_into(&mut bytes)?;
        String::from_utf8(bytes).map_err(|e| GgufError::InvalidUtf8 {
            offset,
            source: e.utf8_error(),
        })
    }

    fn value(&mut self, ty: u32, depth: usize) -> Result<Value> {
        let offset = self.pos;
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.array()?)),
            1 => Value::I8(i8::from_le_bytes(self.array()?)),
            2 => Value::U16(u16::from_le_bytes(self.array()?)),
            3 => Value::I16(i16::from_le_bytes(self.array()?)),
            4 => Value::U32(self.u32()?),
            5 => Value::I32(i32::from_le_bytes(self.array()?)),
            6 => Value::F32(f32::from_le_bytes(self.array()?)),
            7 => match self.array::<1>()?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                value => return Err(GgufError::InvalidBool { offset, value }),
            },
            8 => Value::String(self.string()?),
            9 => self.array_value(depth)?,
            10 => Value::U64(self.u64()?),
            11 => Value::I64(i64::from_le_bytes(self.array()?)),
            12 => Value::F64(f64::from_le_bytes(self.array()?)),
            id => return Err(GgufError::UnknownValueType { id, offset }),
        })
    }

    fn array_value(&mut self, depth: usize) -> Result<Value> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::NestingTooDeep {
                limit: MAX_ARRAY_DEPTH,
            });
        }
        let type_offset = self.pos;
        let elem_ty = self.u32()?;
        let (min_size, elem) = match elem_ty {
            0 => (1, "u8"),
            1 => (1, "i8"),
            7 => (1, "bool"),
            2 => (2, "u16"),
            3 => (2, "i16"),
            4 => (4, "u32"),
            5 => (4, "i32"),
            6 => (4, "f32"),
            10 => (8, "u64"),
            11 => (8, "i64"),
            12 => (8, "f64"),
            8 => (8, "strings"),
            9 => (4 + 8, "arrays"),
            id => {
                return Err(GgufError::UnknownValueType {
                    id,
                    offset: type_offset,
                });
            }
        };
        let offset = self.pos;
        let len = self.u64()?;
        if len > MAX_ARRAY_LEN {
            return Err(GgufError::ArrayTooLong {
                offset,
                len,
                limit: MAX_ARRAY_LEN,
            });
        }
        let needed = len * min_size; // cannot overflow: len <= 2^24
        if needed > self.remaining() {
            return Err(GgufError::ArrayPastEnd {
                offset,
                len,
                elem,
                needed,
                remaining: self.remaining(),
            });
        }
        if let Some(packed) = self.packed(elem_ty, len)? {
            return Ok(Value::Packed(packed));
        }
        self.charge(len * std::mem::size_of::<Value>() as u64)?;
        let mut items = Vec::with_capacity((len as usize).min(PREALLOC_CAP));
        for i in 0..len {
            items.push(
                self.value(elem_ty, depth + 1)
                    .context(|| format!("array element {i}"))?,
            );
        }
        Ok(Value::Array(items))
    }

    /// A numeric or boolean array of `len` elements of type `ty`, read in one piece (the
    /// caller checked that the file holds it); `None` for strings and arrays.
    fn packed(&mut self, ty: u32, len: u64) -> Result<Option<Packed>> {
        fn le<const N: usize, T>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
            bytes
                .chunks_exact(N)
                .map(|c| from(c.try_into().expect("chunks of N")))
                .collect()
        }
        let size = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            _ => return Ok(None),
        };
        let offset = self.pos;
        self.charge(len * size)?;
        let mut bytes = vec![0u8; (len * size) as usize];
        self.read_into(&mut bytes)?;
        Ok(Some(match ty {
            0 => Packed::U8(bytes),
            1 => Packed::I8(le(&bytes, i8::from_le_bytes)),
            2 => Packed::U16(le(&bytes, u16::from_le_bytes)),
            3 => Packed::I16(le(&bytes, i16::from_le_bytes)),
            4 => Packed::U32(le(&bytes, u32::from_le_bytes)),
            5 => Packed::I32(le(&bytes, i32::from_le_bytes)),
            6 => Packed::F32(le(&bytes, f32::from_le_bytes)),
            7 => {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    return Err(GgufError::InvalidBool {
                        offset: offset + i as u64,
                        value: bytes[i],
                    })
                    .context(|| format!("array element {i}"));
                }
                Packed::Bool(bytes.iter().map(|&b| b == 1).collect())
            }
            10 => Packed::U64(le(&bytes, u64::from_le_bytes)),
            11 => Packed::I64(le(&bytes, i64::from_le_bytes)),
            _ => Packed::F64(le(&bytes, f64::from_le_bytes)),
        }))
    }

    /// Reads the rest of a tensor info after its name; errors come back with the name so
    /// the caller can say which tensor is broken.
    fn tensor_info(
        &mut self,
        name: String,
    ) -> std::result::Result<TensorInfo, (String, GgufError)> {
        match self.tensor_info_fields() {
            Ok((dims, ty, offset)) => Ok(TensorInfo {
                name,
                dims,
                ty,
                offset,
            }),
            Err(e) => Err((name, e)),
        }
    }

    fn tensor_info_fields(&mut self) -> Result<(Vec<u64>, GgmlType, u64)> {
        let n_dims = self.u32()?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::BadDimCount {
                n_dims,
                max: MAX_DIMS,
            });
        }
        let dims = (0..n_dims)
            .map(|_| self.u64())
            .collect::<Result<Vec<u64>>>()?;
        if let Some(index) = dims.iter().position(|&d| d == 0 || d > MAX_ELEMENTS) {
            return Err(GgufError::BadDim {
                dims,
                index,
                max: MAX_ELEMENTS,
            });
        }
        match dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d)) {
            Some(n) if n <= MAX_ELEMENTS => {}
            _ => {
                return Err(GgufError::ElementCountOverflow {
                    dims,
                    max: MAX_ELEMENTS,
                });
            }
        }
        let ty = GgmlType::from_id(self.u32()?)?;
        checked_n_bytes(&dims, ty)?;
        let offset = self.u64()?;
        Ok((dims, ty, offset))
    }
}
