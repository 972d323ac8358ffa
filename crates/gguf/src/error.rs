use crate::GgmlType;

pub type Result<T> = std::result::Result<T, GgufError>;

/// Everything reading, validating, converting or writing GGUF data can fail with.
///
/// Files are untrusted input: every check a hostile file can trip has its own variant
/// carrying the numbers involved, and parse errors are wrapped in [`GgufError::Context`]
/// so the message names the key or tensor being read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    #[error("cannot open {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },

    /// A folder, a FIFO, a device: only a regular file is mapped (a FIFO would block).
    #[error("{path} is {kind}, not a model file")]
    NotAFile { path: String, kind: &'static str },

    #[error(
        "truncated: {needed} bytes needed at offset {offset}, but the source is {len} bytes long"
    )]
    Truncated { offset: u64, needed: u64, len: u64 },

    #[error(
        "not a GGUF file: magic is \"{}\", expected \"GGUF\"",
        found.as_slice().escape_ascii()
    )]
    BadMagic { found: [u8; 4] },

    #[error("unsupported GGUF version {version} (supported: 2 and 3){}",
        if *version != 0 && version & 0xFFFF == 0 { "; the file looks byte-swapped (big-endian GGUF is not supported)" } else { "" })]
    UnsupportedVersion { version: u32 },

    /// A header count that the rest of the file cannot possibly hold (checked before allocating).
    #[error(
        "header claims {count} {what}, but the {remaining} bytes left at offset {offset} hold at most {max}"
    )]
    CountTooLarge {
        what: &'static str,
        count: u64,
        max: u64,
        remaining: u64,
        offset: u64,
    },

    #[error("string at offset {offset} is {len} bytes long, over the limit of {limit}")]
    StringTooLong { offset: u64, len: u64, limit: u64 },

    #[error("array at offset {offset} has {len} elements, over the limit of {limit}")]
    ArrayTooLong { offset: u64, len: u64, limit: u64 },

    #[error(
        "array of {len} {elem} at offset {offset} needs at least {needed} bytes, but only {remaining} remain"
    )]
    ArrayPastEnd {
        offset: u64,
        len: u64,
        elem: &'static str,
        needed: u64,
        remaining: u64,
    },

    #[error("Hugging Face checkpoint: {0}")]
    Checkpoint(String),

    #[error("LoRA adapter: {0}")]
    Adapter(String),

    #[error(
        "the metadata needs more than {limit} bytes of memory (at offset {offset}); real models need a few tens of MiB"
    )]
    MetadataTooLarge { limit: u64, offset: u64 },

    #[error("arrays nested deeper than {limit} levels")]
    NestingTooDeep { limit: usize },

    #[error("invalid UTF-8 in string at offset {offset}: {source}")]
    InvalidUtf8 {
        offset: u64,
        source: std::str::Utf8Error,
    },

    #[error("unknown metadata value type id {id} at offset {offset} (valid: 0..=12)")]
    UnknownValueType { id: u32, offset: u64 },

    #[error("bool at offset {offset} has byte value {value}, expected 0 or 1")]
    InvalidBool { offset: u64, value: u8 },

    #[error("metadata key #{index} is empty")]
    EmptyKey { index: u64 },

    #[error("duplicate metadata key {key:?}")]
    DuplicateKey { key: String },

    #[error("metadata key {0:?} is missing")]
    MissingKey(String),

    #[error("metadata key {key:?} has type {got}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        got: &'static str,
    },

    #[error("metadata key {key:?} holds {value}, which does not fit in {target}")]
    OutOfRange {
        key: String,
        value: String,
        target: &'static str,
    },

    #[error("alignment {alignment} is not a non-zero power of two")]
    BadAlignment { alignment: u64 },

    #[error("unknown ggml type id {id}")]
    UnknownType { id: u32 },

    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor { name: String },

    #[error("{n_dims} dimensions, expected 1..={max}")]
    BadDimCount { n_dims: u32, max: u32 },

    #[error("dimension {index} of shape {dims:?} is outside 1..={max}")]
    BadDim {
        dims: Vec<u64>,
        index: usize,
        max: u64,
    },

    #[error("shape {dims:?} has more than {max} elements")]
    ElementCountOverflow { dims: Vec<u64>, max: u64 },

    #[error("{ty}: {elements} elements is not a multiple of the block size {block_size}")]
    NotBlockMultiple {
        ty: GgmlType,
        elements: u64,
        block_size: u64,
    },

    #[error("{ty}: {bytes} bytes is not a whole number of {type_size}-byte blocks")]
    PartialBlock {
        ty: GgmlType,
        bytes: u64,
        type_size: u64,
    },

    #[error("{ty}: byte count of {elements} elements overflows")]
    SizeOverflow { ty: GgmlType, elements: u64 },

    #[error("data offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned { offset: u64, alignment: u64 },

    #[error("data [{start}, {end}) lies past the end of the {file_len}-byte file")]
    DataPastEnd { start: u64, end: u64, file_len: u64 },

    #[error(
        "tensor {a:?} data [{a_start}, {a_end}) overlaps tensor {b:?} data [{b_start}, {b_end})"
    )]
    Overlap {
        a: String,
        a_start: u64,
        a_end: u64,
        b: String,
        b_start: u64,
        b_end: u64,
    },

    #[error("{bytes} bytes do not fit in this platform's address space")]
    TooLarge { bytes: u64 },

    #[error("{ty} has no CPU {op} implementation")]
    UnsupportedType { ty: GgmlType, op: &'static str },

    #[error("{ty}: {bytes} bytes hold {expected} elements, but the output has room for {got}")]
    OutputLength {
        ty: GgmlType,
        bytes: u64,
        expected: u64,
        got: u64,
    },

    #[error("tensor {name:?}: {ty} shape {dims:?} needs {expected} bytes, got {got}")]
    DataLength {
        name: String,
        dims: Vec<u64>,
        ty: GgmlType,
        expected: u64,
        got: u64,
    },

    /// Where in the file an inner error happened (a metadata key, a tensor).
    #[error("{what}: {source}")]
    Context {
        what: String,
        source: Box<GgufError>,
    },
}

impl GgufError {
    /// The innermost error, past any [`GgufError::Context`] wrappers: what to match on.
    pub fn root(&self) -> &GgufError {
        let mut e = self;
        while let GgufError::Context { source, .. } = e {
            e = source;
        }
        e
    }
}

/// Attaches "where" to errors on their way up, built lazily so the happy path never formats.
pub(crate) trait ResultExt<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| GgufError::Context {
            what: what(),
            source: Box::new(e),
        })
    }
}
