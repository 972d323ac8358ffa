use std::fmt;

use crate::{GgufError, Result};

/// A ggml tensor element type. Discriminants are the on-disk ids from `ggml.h`
/// (ids 4, 5 and 31..=33, 36..=38 were removed upstream and are rejected).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    IQ2XXS = 16,
    IQ2XS = 17,
    IQ3XXS = 18,
    IQ1S = 19,
    IQ4NL = 20,
    IQ3S = 21,
    IQ2S = 22,
    IQ4XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
}

/// Super-block size of the k-quants and i-quants (`QK_K`).
const QK_K: u64 = 256;

impl GgmlType {
    /// Every type this crate knows, in id order.
    pub const ALL: [GgmlType; 32] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2K,
        Self::Q3K,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::Q8K,
        Self::IQ2XXS,
        Self::IQ2XS,
        Self::IQ3XXS,
        Self::IQ1S,
        Self::IQ4NL,
        Self::IQ3S,
        Self::IQ2S,
        Self::IQ4XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// Maps an on-disk id; ids ggml never assigned or has retired are [`GgufError::UnknownType`].
    pub fn from_id(id: u32) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.id() == id)
            .ok_or(GgufError::UnknownType { id })
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// The name llama.cpp prints for the format (`"Q4_0"`, `"Q6_K"`, `"IQ2_XXS"`).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            IQ2XXS => "IQ2_XXS",
            IQ2XS => "IQ2_XS",
            IQ3XXS => "IQ3_XXS",
            IQ1S => "IQ1_S",
            IQ4NL => "IQ4_NL",
            IQ3S => "IQ3_S",
            IQ2S => "IQ2_S",
            IQ4XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
        }
    }

    /// Elements per block (1 for plain scalar types).
    pub fn block_size(self) -> u64 {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4NL | MXFP4 => 32,
            Q2K | Q3K | Q4K | Q5K | Q6K | Q8K | IQ2XXS | IQ2XS | IQ3XXS | IQ1S | IQ3S | IQ2S
            | IQ4XS | IQ1M | TQ1_0 | TQ2_0 => QK_K,
        }
    }

    /// Bytes per block, from the `block_*` struct layouts in `ggml-common.h`.
    pub fn type_size(self) -> u64 {
        use GgmlType::*;
        match self {
            I8 => 1,
            F16 | BF16 | I16 => 2,
            F32 | I32 => 4,
            F64 | I64 => 8,
            Q4_0 => 2 + 16,
            Q4_1 => 2 * 2 + 16,
            Q5_0 => 2 + 4 + 16,
            Q5_1 => 2 * 2 + 4 + 16,
            Q8_0 => 2 + 32,
            Q8_1 => 2 * 2 + 32,
            IQ4NL => 2 + 16,
            MXFP4 => 1 + 16,
            Q2K => QK_K / 16 + QK_K / 4 + 2 * 2,
            Q3K => QK_K / 8 + QK_K / 4 + 12 + 2,
            Q4K => 2 * 2 + 12 + QK_K / 2,
            Q5K => 2 * 2 + 12 + QK_K / 8 + QK_K / 2,
            Q6K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
            Q8K => 4 + QK_K + QK_K / 16 * 2,
            IQ2XXS => 2 + QK_K / 8 * 2,
            IQ2XS => 2 + QK_K / 8 * 2 + QK_K / 32,
            IQ3XXS => 2 + 3 * QK_K / 8,
            IQ1S => 2 + QK_K / 8 + QK_K / 32 * 2,
            IQ3S => 2 + QK_K / 4 + QK_K / 32 + QK_K / 8 + QK_K / 64,
            IQ2S => 2 + QK_K / 4 + QK_K / 32 + QK_K / 32,
            IQ4XS => 2 + 2 + QK_K / 64 + QK_K / 2,
            IQ1M => QK_K / 8 + QK_K / 16 + QK_K / 32,
            TQ1_0 => (QK_K - 4 * QK_K / 64) / 5 + QK_K / 64 + 2,
            TQ2_0 => QK_K / 4 + 2,
        }
    }

    /// Whether values are stored in blocks with shared scales (anything but plain scalars).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by `n` consecutive elements; `n` must fill whole blocks.
    pub fn row_bytes(self, n: u64) -> Result<u64> {
        let block_size = self.block_size();
        if !n.is_multiple_of(block_size) {
            return Err(GgufError::NotBlockMultiple {
                ty: self,
                elements: n,
                block_size,
            });
        }
        (n / block_size)
            .checked_mul(self.type_size())
            .ok_or(GgufError::SizeOverflow {
                ty: self,
                elements: n,
            })
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_gaps_are_rejected() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()).unwrap(), t);
        }
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 40, 1000, u32::MAX] {
            assert!(
                matches!(GgmlType::from_id(id), Err(GgufError::UnknownType { id: i }) if i == id)
            );
        }
    }

    #[test]
    fn block_layouts_match_ggml() {
        // (type, block size, bytes per block) as ggml's type traits report them.
        let expected = [
            (GgmlType::F32, 1, 4),
            (GgmlType::F16, 1, 2),
            (GgmlType::Q4_0, 32, 18),
            (GgmlType::Q4_1, 32, 20),
            (GgmlType::Q5_0, 32, 22),
            (GgmlType::Q5_1, 32, 24),
            (GgmlType::Q8_0, 32, 34),
            (GgmlType::Q8_1, 32, 36),
            (GgmlType::Q2K, 256, 84),
            (GgmlType::Q3K, 256, 110),
            (GgmlType::Q4K, 256, 144),
            (GgmlType::Q5K, 256, 176),
            (GgmlType::Q6K, 256, 210),
            (GgmlType::Q8K, 256, 292),
            (GgmlType::IQ2XXS, 256, 66),
            (GgmlType::IQ2XS, 256, 74),
            (GgmlType::IQ3XXS, 256, 98),
            (GgmlType::IQ1S, 256, 50),
            (GgmlType::IQ4NL, 32, 18),
            (GgmlType::IQ3S, 256, 110),
            (GgmlType::IQ2S, 256, 82),
            (GgmlType::IQ4XS, 256, 136),
            (GgmlType::I8, 1, 1),
            (GgmlType::I16, 1, 2),
            (GgmlType::I32, 1, 4),
            (GgmlType::I64, 1, 8),
            (GgmlType::F64, 1, 8),
            (GgmlType::IQ1M, 256, 56),
            (GgmlType::BF16, 1, 2),
            (GgmlType::TQ1_0, 256, 54),
            (GgmlType::TQ2_0, 256, 66),
            (GgmlType::MXFP4, 32, 17),
        ];
        assert_eq!(expected.len(), GgmlType::ALL.len());
        for (t, bs, ts) in expected {
            assert_eq!((t.block_size(), t.type_size()), (bs, ts), "{t}");
        }
    }

    #[test]
    fn row_bytes_checks_blocks_and_overflow() {
        assert_eq!(GgmlType::Q4_0.row_bytes(64).unwrap(), 36);
        assert_eq!(GgmlType::F16.row_bytes(3).unwrap(), 6);
        assert!(matches!(
            GgmlType::Q4_0.row_bytes(33),
            Err(GgufError::NotBlockMultiple { .. })
        ));
        assert!(matches!(
            GgmlType::F64.row_bytes(u64::MAX),
            Err(GgufError::SizeOverflow { .. })
        ));
    }

    #[test]
    fn names_follow_llama_cpp() {
        assert_eq!(GgmlType::Q4_0.name(), "Q4_0");
        assert_eq!(GgmlType::Q6K.to_string(), "Q6_K");
        assert_eq!(GgmlType::IQ2XXS.name(), "IQ2_XXS");
    }
}
