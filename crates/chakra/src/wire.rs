//! The protobuf wire format, decoded by hand: varints, the four wire types the schema uses, and
//! the length-prefixed framing of Chakra's files. Every read is bounds-checked; malformed bytes
//! are an error naming the absolute byte offset in the file, never a panic.
//!
//! A message is a sequence of fields, each a key (a varint: field number << 3 | wire type) and a
//! value: wire type 0 a varint, 1 eight little-endian bytes, 2 a varint length and that many
//! bytes (strings, nested messages, packed repeated numbers), 5 four little-endian bytes. Wire
//! types 3 and 4 (groups) are not used by proto3 schemas and are refused.

/// A decoding error: the byte offset in the file and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub offset: u64,
    pub message: String,
}

/// A field's value as the wire carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    /// The bytes and the offset of their first byte in the file.
    Bytes(&'a [u8], u64),
    Fixed32(u32),
}

impl Value<'_> {
    /// The wire type's name, for errors.
    pub fn wire_name(&self) -> &'static str {
        match self {
            Value::Varint(_) => "varint",
            Value::Fixed64(_) => "64-bit",
            Value::Bytes(..) => "length-delimited",
            Value::Fixed32(_) => "32-bit",
        }
    }
}

/// A cursor over one message's bytes (`base`: the file offset of `buf[0]`).
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], base: u64) -> Reader<'a> {
        Reader { buf, pos: 0, base }
    }

    /// The file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn err(&self, at: u64, message: impl Into<String>) -> WireError {
        WireError { offset: at, message: message.into() }
    }

    /// A varint of at most 10 bytes whose value fits in 64 bits.
    pub fn varint(&mut self) -> Result<u64, WireError> {
        let start = self.offset();
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(self.err(start, "truncated varint (the input ends inside it)"));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(self.err(start, "varint does not fit in 64 bits"));
            }
            v |= ((b & 0x7F) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(start, "varint longer than 10 bytes"))
    }

    fn take(&mut self, n: u64, what: &str) -> Result<(&'a [u8], u64), WireError> {
        let at = self.offset();
        let left = (self.buf.len() - self.pos) as u64;
        if n > left {
            return Err(self.err(at, format!("truncated {what}: {n} bytes announced, {left} left")));
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok((s, at))
    }

    /// The next field (number, value), or `None` at the end of the message.
    pub fn field(&mut self) -> Result<Option<(u32, Value<'a>)>, WireError> {
        if self.at_end() {
            return Ok(None);
        }
        let at = self.offset();
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(self.err(at, format!("field number {number} is not valid (1 … 536870911)")));
        }
        let number = number as u32;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                let (b, _) = self.take(8, "64-bit field")?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let n = self.varint()?;
                let (b, o) = self.take(n, "length-delimited field")?;
                Value::Bytes(b, o)
            }
            5 => {
                let (b, _) = self.take(4, "32-bit field")?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            3 | 4 => {
                return Err(self.err(at, format!("field {number}: groups (wire types 3, 4) are not in the schema")))
            }
            w => return Err(self.err(at, format!("field {number}: wire type {w} does not exist"))),
        };
        Ok(Some((number, value)))
    }
}

/// The messages of a file framed as Chakra writes them (its `protolib.encodeMessage`): each one
/// a varint length (at most 32 bits) and that many bytes. Yields (offset of the length prefix,
/// offset of the body, body).
pub fn frames(data: &[u8]) -> impl Iterator<Item = Result<(u64, u64, &[u8]), WireError>> + '_ {
    let mut r = Reader::new(data, 0);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || r.at_end() {
            return None;
        }
        let at = r.offset();
        let item = (|| {
            let n = r.varint()?;
            if n > u32::MAX as u64 {
                return Err(WireError {
                    offset: at,
                    message: format!("message length {n} does not fit in the 32-bit length prefix"),
                });
            }
            // Named at its length prefix, where the message starts.
            let (body, o) = r.take(n, "message").map_err(|e| WireError { offset: at, ..e })?;
            Ok((at, o, body))
        })();
        failed = item.is_err();
        Some(item)
    })
}

/// Packed (length-delimited) or single (varint) elements of a `repeated uint64` field, appended
/// to `out` (`at`: the field's offset, for errors).
pub fn repeated_u64(v: Value<'_>, at: u64, out: &mut Vec<u64>) -> Result<(), WireError> {
    match v {
        Value::Varint(x) => out.push(x),
        Value::Bytes(b, o) => {
            let mut r = Reader::new(b, o);
            while !r.at_end() {
                out.push(r.varint()?);
            }
        }
        other => {
            return Err(WireError { offset: at, message: format!("{} value for a repeated uint64", other.wire_name()) })
        }
    }
    Ok(())
}

/// Appends `v` as a varint (for writers of test and example traces).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_overflow_is_refused() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut r = Reader::new(&b, 0);
            assert_eq!(r.varint().unwrap(), v);
            assert!(r.at_end());
        }
        let mut r = Reader::new(&[0xFF; 9], 5);
        assert_eq!(r.varint().unwrap_err().offset, 5);
        let mut r = Reader::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02], 0);
        assert!(r.varint().unwrap_err().message.contains("64 bits"));
    }

    #[test]
    fn fields_of_each_wire_type() {
        // 1: varint 150; 2: "hi"; 3: fixed64 7; 4: fixed32 9.
        let b = [0x08, 0x96, 0x01, 0x12, 2, b'h', b'i', 0x19, 7, 0, 0, 0, 0, 0, 0, 0, 0x25, 9, 0, 0, 0];
        let mut r = Reader::new(&b, 100);
        assert_eq!(r.field().unwrap(), Some((1, Value::Varint(150))));
        assert_eq!(r.field().unwrap(), Some((2, Value::Bytes(b"hi", 105))));
        assert_eq!(r.field().unwrap(), Some((3, Value::Fixed64(7))));
        assert_eq!(r.field().unwrap(), Some((4, Value::Fixed32(9))));
        assert_eq!(r.field().unwrap(), None);
        let e = Reader::new(&[0x12, 5, b'a'], 0).field().unwrap_err();
        assert!(e.message.contains("5 bytes announced, 1 left"), "{e:?}");
        assert!(Reader::new(&[0x0B], 0).field().unwrap_err().message.contains("groups"));
        assert!(Reader::new(&[0x00, 0], 0).field().unwrap_err().message.contains("field number 0"));
    }
}
