//! The GGUF reader's `ByteSource` over reads the worker serves synchronously: from an OPFS
//! access handle (a cached download), a `File` (FileReaderSync) or ranged XHR. Only the
//! ranges the parser and the weight loader ask for ever cross into wasm memory.

use std::cell::Cell;

use js_sys::Uint8Array;
use lilypad_gguf::{ByteSource, GgufError, Result};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// `{ size: number, readAt(offset: number, length: number): Uint8Array | undefined }`;
    /// `undefined` means the range is not downloaded yet.
    #[wasm_bindgen(typescript_type = "ModelReader")]
    pub type ModelReader;

    #[wasm_bindgen(method, getter)]
    fn size(this: &ModelReader) -> f64;

    #[wasm_bindgen(method, catch, js_name = readAt)]
    fn read_at(
        this: &ModelReader,
        offset: f64,
        length: u32,
    ) -> std::result::Result<JsValue, JsValue>;
}

pub struct JsByteSource {
    reader: ModelReader,
    len: u64,
    /// Set when a read asked for bytes that are not there yet (a partial download).
    missing: Cell<bool>,
}

// SAFETY: wasm32 without the atomics feature has exactly one thread, so the JS handle is never
// shared across threads; `ByteSource` asks for Send + Sync only for native callers.
#[cfg(not(target_feature = "atomics"))]
unsafe impl Send for JsByteSource {}
#[cfg(not(target_feature = "atomics"))]
unsafe impl Sync for JsByteSource {}

impl JsByteSource {
    pub fn new(reader: ModelReader) -> Self {
        let len = reader.size() as u64;
        Self {
            reader,
            len,
            missing: Cell::new(false),
        }
    }

    /// Whether a read failed only because its bytes have not arrived yet.
    pub fn hit_missing(&self) -> bool {
        self.missing.get()
    }

    fn failed(&self, offset: u64, why: String) -> GgufError {
        GgufError::Io {
            path: format!("model bytes at {offset}"),
            source: std::io::Error::other(why),
        }
    }
}

impl ByteSource for JsByteSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= self.len);
        if end.is_none() {
            return Err(GgufError::Truncated {
                offset,
                needed: buf.len() as u64,
                len: self.len,
            });
        }
        let length = u32::try_from(buf.len()).map_err(|_| GgufError::TooLarge {
            bytes: buf.len() as u64,
        })?;
        let value = self
            .reader
            .read_at(offset as f64, length)
            .map_err(|e| self.failed(offset, crate::bindings::js_message(&e)))?;
        if value.is_undefined() || value.is_null() {
            self.missing.set(true);
            return Err(self.failed(offset, "not downloaded yet".into()));
        }
        let bytes: Uint8Array = value
            .dyn_into()
            .map_err(|_| self.failed(offset, "the reader did not return a Uint8Array".into()))?;
        if bytes.length() != length {
            return Err(self.failed(
                offset,
                format!("short read: {} of {length} bytes", bytes.length()),
            ));
        }
        bytes.copy_to(buf);
        Ok(())
    }
}
