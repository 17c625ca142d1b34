//! Element types and reduction operators of Flare's handlers (seed 004 §2.4 F1, §6.4).
//!
//! Elements travel as little-endian bytes in packet payloads and aggregation buffers; an
//! [`Operator`] combines two such byte slices element-wise (`acc = acc ⊕ other`). The cost of one
//! combine is charged by the switch model from the type's SIMD width ([`DataType::lanes`]): an
//! HPU processes `lanes` elements per vector operation (seed 004 §6.4: "the HPUs of the PsPIN
//! unit use vectorization and can aggregate, for example, two int16 elements in a single cycle").

use std::fmt;

/// An element type the PsPIN cores aggregate. (No f64: "Flare currently does not support the
/// aggregation of double-precision floating-point elements", §6.4.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    Int32,
    Int16,
    Int8,
    F32,
    F16,
}

impl DataType {
    pub const ALL: [DataType; 5] = [DataType::Int32, DataType::Int16, DataType::Int8, DataType::F32, DataType::F16];

    /// Bytes per element.
    pub fn bytes(self) -> u32 {
        match self {
            DataType::Int32 | DataType::F32 => 4,
            DataType::Int16 | DataType::F16 => 2,
            DataType::Int8 => 1,
        }
    }

    /// Elements one vector operation of an HPU combines: 32-bit registers hold one int32/f32,
    /// two int16/f16 or four int8 (RI5CY packed SIMD; the FP32/FP16 FPU of §3 with FP16 SIMD).
    pub fn lanes(self) -> u32 {
        4 / self.bytes()
    }

    /// The name used in scenario files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DataType::Int32 => "int32",
            DataType::Int16 => "int16",
            DataType::Int8 => "int8",
            DataType::F32 => "f32",
            DataType::F16 => "f16",
        }
    }

    pub fn from_name(s: &str) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| d.name() == s)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DataType::F32 | DataType::F16)
    }

    /// Element `i` of `bytes` as f64 (exact for every type).
    pub fn get(self, bytes: &[u8], i: usize) -> f64 {
        let w = self.bytes() as usize;
        let b = &bytes[i * w..(i + 1) * w];
        match self {
            DataType::Int32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DataType::Int16 => i16::from_le_bytes([b[0], b[1]]) as f64,
            DataType::Int8 => b[0] as i8 as f64,
            DataType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
            DataType::F16 => f16_to_f32(u16::from_le_bytes([b[0], b[1]])) as f64,
        }
    }

    /// Stores `v` as element `i` (integers wrap, floats round to nearest even).
    pub fn set(self, bytes: &mut [u8], i: usize, v: f64) {
        let w = self.bytes() as usize;
        let b = &mut bytes[i * w..(i + 1) * w];
        match self {
            DataType::Int32 => b.copy_from_slice(&(v as i64 as i32).to_le_bytes()),
            DataType::Int16 => b.copy_from_slice(&(v as i64 as i16).to_le_bytes()),
            DataType::Int8 => b[0] = v as i64 as i8 as u8,
            DataType::F32 => b.copy_from_slice(&(v as f32).to_le_bytes()),
            DataType::F16 => b.copy_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A user-defined operator: combines `other` into `acc` element-wise (both `dtype` slices of the
/// same length), costing `cycles_per_vector_op` cycles per vector operation of the type's width.
#[derive(Clone, Copy)]
pub struct UserOperator {
    pub name: &'static str,
    pub combine: fn(DataType, &mut [u8], &[u8]),
    pub cycles_per_vector_op: u32,
}

impl fmt::Debug for UserOperator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserOperator({})", self.name)
    }
}

/// A reduction operator. The built-in ones cost the calibrated 4 cycles per vector operation
/// ([`super::CostModel::cycles_per_vector_op`]); a user operator states its own cost.
#[derive(Clone, Copy, Debug)]
pub enum Operator {
    Sum,
    Min,
    Max,
    Prod,
    User(UserOperator),
}

impl Operator {
    pub fn name(&self) -> &'static str {
        match self {
            Operator::Sum => "sum",
            Operator::Min => "min",
            Operator::Max => "max",
            Operator::Prod => "prod",
            Operator::User(u) => u.name,
        }
    }

    /// A built-in operator by name (`sum`, `min`, `max`, `prod`).
    pub fn from_name(s: &str) -> Option<Operator> {
        Some(match s {
            "sum" => Operator::Sum,
            "min" => Operator::Min,
            "max" => Operator::Max,
            "prod" => Operator::Prod,
            _ => return None,
        })
    }

    /// `acc[i] = acc[i] ⊕ other[i]` for every element. Integer sums and products wrap (two's
    /// complement, as the cores' ALUs do); floats are IEEE single precision, f16 rounded back
    /// after each operation.
    pub fn combine(&self, dtype: DataType, acc: &mut [u8], other: &[u8]) {
        assert_eq!(acc.len(), other.len(), "combine: operands of different lengths");
        if let Operator::User(u) = self {
            return (u.combine)(dtype, acc, other);
        }
        match dtype {
            DataType::Int32 => ints::<4>(acc, other, |a, b| self.int(a, b) as i32 as i64),
            DataType::Int16 => ints::<2>(acc, other, |a, b| self.int(a, b) as i16 as i64),
            DataType::Int8 => ints::<1>(acc, other, |a, b| self.int(a, b) as i8 as i64),
            DataType::F32 => {
                for (a, b) in acc.chunks_exact_mut(4).zip(other.chunks_exact(4)) {
                    let x = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
                    let y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    a.copy_from_slice(&self.float(x, y).to_le_bytes());
                }
            }
            DataType::F16 => {
                for (a, b) in acc.chunks_exact_mut(2).zip(other.chunks_exact(2)) {
                    let x = f16_to_f32(u16::from_le_bytes([a[0], a[1]]));
                    let y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
                    a.copy_from_slice(&f32_to_f16(self.float(x, y)).to_le_bytes());
                }
            }
        }
    }

    fn int(&self, a: i64, b: i64) -> i64 {
        match self {
            Operator::Sum => a.wrapping_add(b),
            Operator::Min => a.min(b),
            Operator::Max => a.max(b),
            Operator::Prod => a.wrapping_mul(b),
            Operator::User(_) => unreachable!(),
        }
    }

    fn float(&self, a: f32, b: f32) -> f32 {
        match self {
            Operator::Sum => a + b,
            Operator::Min => a.min(b),
            Operator::Max => a.max(b),
            Operator::Prod => a * b,
            Operator::User(_) => unreachable!(),
        }
    }
}

fn ints<const W: usize>(acc: &mut [u8], other: &[u8], f: impl Fn(i64, i64) -> i64) {
    for (a, b) in acc.chunks_exact_mut(W).zip(other.chunks_exact(W)) {
        let x = read_int::<W>(a);
        let y = read_int::<W>(b);
        a.copy_from_slice(&f(x, y).to_le_bytes()[..W]);
    }
}

fn read_int<const W: usize>(b: &[u8]) -> i64 {
    match W {
        4 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        2 => i16::from_le_bytes([b[0], b[1]]) as i64,
        _ => b[0] as i8 as i64,
    }
}

/// IEEE 754 binary16 → binary32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h >> 15) as u32) << 31;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: normalise.
            let mut e = 127 - 15 + 1;
            let mut m = m;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((m & 0x3ff) << 13)
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// IEEE 754 binary32 → binary16, rounding to nearest even (overflow to ±inf).
pub fn f32_to_f16(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut r = m >> shift;
        if rest > half || (rest == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r as u16;
    }
    let mut r = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && r & 1 == 1) {
        r += 1; // may carry into the exponent, which is the correct rounding
    }
    sign | r as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(d: DataType, v: &[f64]) -> Vec<u8> {
        let mut b = vec![0u8; v.len() * d.bytes() as usize];
        for (i, x) in v.iter().enumerate() {
            d.set(&mut b, i, *x);
        }
        b
    }

    #[test]
    fn every_builtin_operator_on_every_type_matches_a_plain_reference() {
        let a = [3.0, -7.0, 100.0, 0.5];
        let b = [5.0, 2.0, -30.0, 0.25];
        for d in DataType::ALL {
            for (op, f) in [
                (Operator::Sum, (|x: f64, y: f64| x + y) as fn(f64, f64) -> f64),
                (Operator::Min, |x, y| x.min(y)),
                (Operator::Max, |x, y| x.max(y)),
                (Operator::Prod, |x, y| x * y),
            ] {
                let mut acc = bytes(d, &a);
                op.combine(d, &mut acc, &bytes(d, &b));
                for i in 0..4 {
                    // Integer types truncate 0.5/0.25 to 0 on the way in.
                    let (x, y) = (d.get(&bytes(d, &a), i), d.get(&bytes(d, &b), i));
                    let want = d.get(&bytes(d, &[f(x, y)]), 0);
                    assert_eq!(d.get(&acc, i), want, "{d} {} element {i}", op.name());
                }
            }
        }
    }

    #[test]
    fn integer_sums_wrap_like_the_cores_alus() {
        let mut acc = bytes(DataType::Int8, &[120.0]);
        Operator::Sum.combine(DataType::Int8, &mut acc, &bytes(DataType::Int8, &[10.0]));
        assert_eq!(DataType::Int8.get(&acc, 0), -126.0);
    }

    #[test]
    fn f16_round_trips_and_rounds_to_nearest_even() {
        for h in (0u16..=0xffff).step_by(7) {
            let f = f16_to_f32(h);
            if f.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
        }
        assert_eq!(f16_to_f32(f32_to_f16(1.0 + 1.0 / 4096.0)), 1.0); // halfway, ties to even
        assert_eq!(f16_to_f32(f32_to_f16(65504.0)), 65504.0);
        assert!(f16_to_f32(f32_to_f16(1e6)).is_infinite());
    }

    #[test]
    fn a_user_operator_is_called_instead_of_the_builtin_code() {
        fn absmax(d: DataType, acc: &mut [u8], other: &[u8]) {
            for i in 0..acc.len() / d.bytes() as usize {
                let v = d.get(acc, i).abs().max(d.get(other, i).abs());
                d.set(acc, i, v);
            }
        }
        let op = Operator::User(UserOperator { name: "absmax", combine: absmax, cycles_per_vector_op: 6 });
        let mut acc = bytes(DataType::Int16, &[-9.0, 2.0]);
        op.combine(DataType::Int16, &mut acc, &bytes(DataType::Int16, &[4.0, -5.0]));
        assert_eq!((DataType::Int16.get(&acc, 0), DataType::Int16.get(&acc, 1)), (9.0, 5.0));
        assert_eq!(op.name(), "absmax");
    }

    #[test]
    fn vector_widths_follow_the_element_size() {
        let lanes: Vec<u32> = DataType::ALL.iter().map(|d| d.lanes()).collect();
        assert_eq!(lanes, [1, 2, 4, 1, 2]);
    }
}
