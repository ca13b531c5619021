//! Injected randomness.
//!
//! Jitter (backoff, the ramp after a pause) and fresh identifiers need randomness, but a
//! simulation must be reproducible from a seed. So the engine owns a small seeded generator
//! instead of calling an OS source: the worker seeds it from `crypto.getRandomValues`, tests
//! and the simulator from a fixed number. xoshiro256** is small, fast and statistically sound
//! for jitter, but not unpredictable: job ids and idempotency keys (122 random bits, like any
//! UUID v4) come from the [`IdentifierSource`] the worker gives the engine, its
//! `crypto.getRandomValues`, and from the generator only in tests and the simulator.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator from 32 bytes of seed (all zero is remapped, as xoshiro cannot leave it).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let mut s = [0u64; 4];
        for (i, chunk) in seed.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            s[i] = u64::from_le_bytes(b);
        }
        if s == [0; 4] {
            s = [
                0x9E37_79B9_7F4A_7C15,
                0xBF58_476D_1CE4_E5B9,
                0x94D0_49BB_1331_11EB,
                1,
            ];
        }
        Self { s }
    }

    /// A generator from a single number, for tests and simulations (expanded with SplitMix64).
    pub fn seeded(seed: u64) -> Self {
        let mut x = seed;
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_exact_mut(8) {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        Self::from_seed(bytes)
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..=max`.
    pub fn below_or_equal(&mut self, max: u64) -> u64 {
        if max == u64::MAX {
            return self.next_u64();
        }
        self.next_u64() % (max + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// 16 random bytes shaped as a UUID v4 (version and variant bits set).
    pub fn uuid_v4(&mut self) -> String {
        let mut b = [0u8; 16];
        self.fill(&mut b);
        uuid_v4_from(b)
    }

    /// 16 bytes of this generator's output.
    pub fn fill(&mut self, b: &mut [u8; 16]) {
        b[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        b[8..].copy_from_slice(&self.next_u64().to_le_bytes());
    }
}

/// Where job ids and idempotency keys get their randomness. Jitter may come from a seeded
/// generator, but an identifier a page or the server sees must not let anyone predict the next
/// (a create's key is what stops the server applying it twice): the worker hands the engine
/// the platform's cryptographic source (`crypto.getRandomValues`). Tests and the simulator keep
/// the seeded generator, for runs that replay.
pub type IdentifierSource = Box<dyn FnMut(&mut [u8; 16]) -> bool>;

/// 16 random bytes shaped as a UUID v4 (version and variant bits set).
pub fn uuid_v4_from(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    // Written digit by digit: `format!("{x:02x}")` and string slicing bring core's padding
    // and slice panic code into the wasm.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut uuid = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            uuid.push('-');
        }
        uuid.push(char::from(HEX[usize::from(x >> 4)]));
        uuid.push(char::from(HEX[usize::from(x & 0xf)]));
    }
    uuid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let (mut a, mut b) = (Rng::seeded(7), Rng::seeded(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn uuid_has_version_and_variant() {
        let id = Rng::seeded(1).uuid_v4();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn uuid_is_the_random_bytes_in_hex_groups() {
        let mut r = Rng::seeded(5);
        let id = r.clone().uuid_v4();
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&r.next_u64().to_le_bytes());
        b[8..].copy_from_slice(&r.next_u64().to_le_bytes());
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        let expected = format!(
            "{}-{}-{}-{}-{}",
            &hex[0..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..32]
        );
        assert_eq!(id, expected);
    }

    #[test]
    fn unit_is_in_range() {
        let mut r = Rng::seeded(3);
        for _ in 0..1000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
