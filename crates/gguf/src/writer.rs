use crate::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC, align_up, checked_n_bytes};
use crate::{GgmlType, GgufError, Metadata, Result, Value};

/// Builds GGUF v3 files in memory, laid out as ggml writes them: header, metadata,
/// tensor infos, padding to the alignment, then each tensor's data padded to the alignment.
///
/// It checks only what it needs to produce a well-formed byte layout (data lengths, unique
/// tensor names), so tests can also write files the reader must reject — zero or too many
/// dimensions, a bad `general.alignment` set through [`GgufWriter::metadata`].
#[derive(Clone, Debug)]
pub struct GgufWriter {
    alignment: u64,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
}

#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    /// Bytes the tensor takes.
    len: u64,
    /// None for a tensor declared with [`GgufWriter::declare_tensor`].
    data: Option<Vec<u8>>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Metadata::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets the data alignment; unless the metadata already sets `general.alignment`, a value
    /// other than the default is also recorded there so readers lay the file out the same way.
    ///
    /// # Panics
    /// If `a` is not a power of two that fits in the `u32` GGUF stores it as.
    pub fn alignment(mut self, a: u64) -> Self {
        assert!(
            a.is_power_of_two() && a <= u32::MAX.into(),
            "GGUF alignment must be a u32 power of two, got {a}"
        );
        self.alignment = a;
        self
    }

    /// Adds or replaces a metadata entry (a replaced key keeps its position).
    ///
    /// # Panics
    /// If an array mixes element types, which GGUF cannot encode (nested arrays may differ
    /// from each other, but each must itself be homogeneous).
    pub fn metadata(&mut self, key: &str, v: Value) {
        assert_homogeneous(key, &v);
        self.metadata.insert(key, v);
    }

    /// Adds a tensor; `data` must be exactly the bytes its shape and type take.
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> Result<()> {
        let expected = self.check_new(name, dims, ty)?;
        if data.len() as u64 != expected {
            return Err(GgufError::DataLength {
                name: name.to_owned(),
                dims: dims.to_vec(),
                ty,
                expected,
                got: data.len() as u64,
            });
        }
        self.push(name, dims, ty, expected, Some(data));
        Ok(())
    }

    /// Adds a tensor whose bytes [`GgufWriter::write_to`] asks for when it gets there, so a
    /// file larger than memory can be written. Returns the bytes it will take.
    pub fn declare_tensor(&mut self, name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
        let len = self.check_new(name, dims, ty)?;
        self.push(name, dims, ty, len, None);
        Ok(len)
    }

    fn check_new(&self, name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor {
                name: name.to_owned(),
            });
        }
        checked_n_bytes(dims, ty).map_err(|e| GgufError::Context {
            what: format!("tensor {name:?}"),
            source: Box::new(e),
        })
    }

    fn push(&mut self, name: &str, dims: &[u64], ty: GgmlType, len: u64, data: Option<Vec<u8>>) {
        self.tensors.push(PendingTensor {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            len,
            data,
        });
    }

    /// Everything before the first tensor's data: header, metadata, tensor infos, padding.
    fn header(&self) -> Vec<u8> {
        let add_alignment_key =
            self.alignment != DEFAULT_ALIGNMENT && !self.metadata.contains_key("general.alignment");
        let n_kv = self.metadata.len() as u64 + u64::from(add_alignment_key);

        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&n_kv.to_le_bytes());

        if add_alignment_key {
            write_kv(
                &mut out,
                "general.alignment",
                &Value::U32(self.alignment as u32),
            );
        }
        for (k, v) in self.metadata.iter() {
            write_kv(&mut out, k, v);
        }

        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = align_up(offset + t.len, self.alignment).expect("tensor data fits in u64");
        }
        pad(&mut out, self.alignment);
        out
    }

    /// The whole file in memory (declared tensors are written as zeros).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.header();
        for t in &self.tensors {
            match &t.data {
                Some(d) => out.extend_from_slice(d),
                None => out.resize(out.len() + t.len as usize, 0),
            }
            pad(&mut out, self.alignment);
        }
        out
    }

    /// Streams the file to `out`. `fill(name, len)` supplies each declared tensor's bytes,
    /// exactly `len` of them; tensors added with data are written as given.
    pub fn write_to(
        &self,
        out: &mut dyn std::io::Write,
        fill: &mut dyn FnMut(&str, u64) -> Vec<u8>,
    ) -> std::io::Result<()> {
        let header = self.header();
        out.write_all(&header)?;
        let mut pos = header.len() as u64;
        for t in &self.tensors {
            let filled;
            let data = match &t.data {
                Some(d) => d,
                None => {
                    filled = fill(&t.name, t.len);
                    if filled.len() as u64 != t.len {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("{}: {} bytes supplied for {}", t.name, filled.len(), t.len),
                        ));
                    }
                    &filled
                }
            };
            out.write_all(data)?;
            pos += t.len;
            let aligned = align_up(pos, self.alignment).expect("file size fits in u64");
            out.write_all(&vec![0; (aligned - pos) as usize])?;
            pos = aligned;
        }
        Ok(())
    }
}

fn pad(out: &mut Vec<u8>, alignment: u64) {
    let len = align_up(out.len() as u64, alignment).expect("file fits in memory");
    out.resize(len as usize, 0);
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_kv(out: &mut Vec<u8>, key: &str, v: &Value) {
    write_str(out, key);
    out.extend_from_slice(&v.type_id().to_le_bytes());
    write_payload(out, v);
}

fn write_payload(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(u8::from(*x)),
        Value::String(s) => write_str(out, s),
        Value::Packed(p) => {
            out.extend_from_slice(&p.element_type_id().to_le_bytes());
            out.extend_from_slice(&(p.len() as u64).to_le_bytes());
            out.extend_from_slice(&p.to_le_bytes());
        }
        Value::Array(items) => {
            // An empty array still needs an element type; u8 is as good as any.
            let elem_ty = items.first().map_or(0, Value::type_id);
            out.extend_from_slice(&elem_ty.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_payload(out, item);
            }
        }
    }
}

fn assert_homogeneous(key: &str, v: &Value) {
    if let Value::Array(items) = v {
        if let Some(first) = items.first() {
            let bad = items.iter().find(|i| i.type_id() != first.type_id());
            assert!(
                bad.is_none(),
                "metadata {key:?}: GGUF arrays hold one element type, found {} and {}",
                first.type_name(),
                bad.map_or("", Value::type_name)
            );
        }
        items.iter().for_each(|i| assert_homogeneous(key, i));
    }
}
