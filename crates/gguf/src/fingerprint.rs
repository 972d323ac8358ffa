//! A model file's identity without reading all of it: what a saved sequence state is keyed
//! by, so it is only ever put back into the weights that computed it.

use sha2::{Digest, Sha256};

use crate::{ByteSource, GgufFile, Result};

/// Bytes read from the start of each tensor.
const SAMPLE: u64 = 4096;

/// SHA-256 (hex) of the file's length, its whole header (metadata and tensor table) and the
/// first 4 KiB of every tensor's data: two files with the same header but other weights (a
/// fine-tune of the same architecture, another quantization) differ here, at the cost of a
/// few hundred small reads.
pub fn fingerprint(file: &GgufFile, src: &dyn ByteSource) -> Result<String> {
    let mut hash = Sha256::new();
    hash.update(file.file_len.to_le_bytes());
    let mut header = vec![0; file.data_offset.min(src.len()) as usize];
    src.read_at(0, &mut header)?;
    hash.update(&header);
    let mut sample = vec![0; SAMPLE as usize];
    for t in &file.tensors {
        let n = t.n_bytes().min(SAMPLE) as usize;
        src.read_at(t.offset, &mut sample[..n])?;
        hash.update(&sample[..n]);
    }
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
