use std::sync::Arc;

use crate::{GgufError, Result};

/// Random-access bytes: a memory map natively, ranged HTTP fetches in the browser.
///
/// The parser only ever asks for ranges, so a multi-gigabyte model never has to sit in
/// one contiguous allocation (which wasm32 could not address anyway).
pub trait ByteSource: Send + Sync {
    fn len(&self) -> u64;

    /// Fills `buf` exactly from `offset`; [`GgufError::Truncated`] if that runs past the end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// Zero-copy view when the whole source is in memory (mmap, `Vec`).
    fn as_slice(&self) -> Option<&[u8]> {
        None
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The range check every in-memory source shares.
fn slice_read_at(data: &[u8], offset: u64, buf: &mut [u8]) -> Result<()> {
    let truncated = || GgufError::Truncated {
        offset,
        needed: buf.len() as u64,
        len: data.len() as u64,
    };
    let start = usize::try_from(offset).map_err(|_| truncated())?;
    let end = start.checked_add(buf.len()).ok_or_else(truncated)?;
    let src = data.get(start..end).ok_or_else(truncated)?;
    buf.copy_from_slice(src);
    Ok(())
}

impl ByteSource for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        slice_read_at(self, offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
}

impl ByteSource for Vec<u8> {
    fn len(&self) -> u64 {
        Vec::len(self) as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        slice_read_at(self, offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self)
    }
}

macro_rules! forward_byte_source {
    ($($ptr:ty),*) => {$(
        impl<T: ByteSource + ?Sized> ByteSource for $ptr {
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
                (**self).read_at(offset, buf)
            }
            fn as_slice(&self) -> Option<&[u8]> {
                (**self).as_slice()
            }
        }
    )*};
}
forward_byte_source!(&T, Box<T>, Arc<T>);

/// A read-only memory map of a model file: tensors are borrowed straight from the page cache.
#[cfg(not(target_arch = "wasm32"))]
#[derive(Debug)]
pub struct MmapSource {
    map: memmap2::Mmap,
}

#[cfg(not(target_arch = "wasm32"))]
impl MmapSource {
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.display().to_string(),
            source,
        };
        // Checked before opening: opening a FIFO for reading blocks until a writer appears.
        let kind = std::fs::metadata(path).map_err(io)?.file_type();
        if !kind.is_file() {
            return Err(GgufError::NotAFile {
                path: path.display().to_string(),
                kind: file_kind(kind),
            });
        }
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and never handed out mutably. Another process
        // truncating or rewriting the file while it is mapped is outside what this type can
        // guard against (as with every mmap-based loader); model files are treated as immutable.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(Self { map })
    }
}

/// What a path that is not a regular file is, in words.
#[cfg(not(target_arch = "wasm32"))]
fn file_kind(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    if kind.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for MmapSource {
    fn len(&self) -> u64 {
        self.map.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        slice_read_at(&self.map, offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(&self.map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_range_checked() {
        let v: Vec<u8> = (0..10).collect();
        let mut buf = [0u8; 3];
        v.read_at(7, &mut buf).unwrap();
        assert_eq!(buf, [7, 8, 9]);
        assert!(matches!(
            v.read_at(8, &mut buf),
            Err(GgufError::Truncated {
                offset: 8,
                needed: 3,
                len: 10
            })
        ));
        assert!(v.read_at(u64::MAX, &mut buf).is_err());
        let s: &[u8] = &v;
        assert_eq!(ByteSource::len(&s), 10);
        let dynamic: &dyn ByteSource = &s;
        assert_eq!(dynamic.as_slice().unwrap().len(), 10);
        let arc: Arc<dyn ByteSource> = Arc::new(v);
        assert_eq!(arc.len(), 10);
    }
}
