//! Chakra's execution-trace schema (`schema/protobuf/et_def.proto` of `mlcommons/chakra`, package
//! `ChakraProtoMsg`, proto3) read from and written to the wire, for the messages and fields a
//! simulation needs. Field numbers are the schema's:
//!
//! | message | fields read |
//! |---|---|
//! | `GlobalMetadata` | `version` = 1 (string); `attr` = 2 skipped |
//! | `Node` | `id` = 1 (uint64), `name` = 2, `type` = 3 (`NodeType`), `ctrl_deps` = 4, `data_deps` = 5 (repeated uint64, packed or not), `start_time_micros` = 6, `duration_micros` = 7 (uint64), `attr` = 10; `inputs` = 8, `outputs` = 9 skipped |
//! | `AttributeProto` | `name` = 1; of the `value` oneof: the integers `int32_val` = 7, `int64_val` = 9, `uint32_val` = 11, `uint64_val` = 13, `sint32_val` = 15, `sint64_val` = 17, `fixed32_val` = 19, `fixed64_val` = 21, `sfixed32_val` = 23, `sfixed64_val` = 25, `bool_val` = 27, `string_val` = 29; the others are kept as their field's name only |
//!
//! Unknown fields are skipped, as protobuf readers do (newer schemas stay readable); a known field
//! of the wrong wire type is an error. A file is framed as Chakra's `protolib.encodeMessage`
//! writes it: a `GlobalMetadata` message, then `Node` messages, each preceded by its length as a
//! varint ([`crate::wire::frames`]).

use crate::wire::{self, put_varint, Reader, Value, WireError};

/// `NodeType` of the schema (its numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeType {
    Metadata = 1,
    MemLoad = 2,
    MemStore = 3,
    Comp = 4,
    CommSend = 5,
    CommRecv = 6,
    CommColl = 7,
}

impl NodeType {
    pub fn from_i32(v: i32) -> Option<NodeType> {
        Some(match v {
            1 => NodeType::Metadata,
            2 => NodeType::MemLoad,
            3 => NodeType::MemStore,
            4 => NodeType::Comp,
            5 => NodeType::CommSend,
            6 => NodeType::CommRecv,
            7 => NodeType::CommColl,
            _ => return None,
        })
    }

    /// Its name in the schema.
    pub fn name(self) -> &'static str {
        match self {
            NodeType::Metadata => "METADATA_NODE",
            NodeType::MemLoad => "MEM_LOAD_NODE",
            NodeType::MemStore => "MEM_STORE_NODE",
            NodeType::Comp => "COMP_NODE",
            NodeType::CommSend => "COMM_SEND_NODE",
            NodeType::CommRecv => "COMM_RECV_NODE",
            NodeType::CommColl => "COMM_COLL_NODE",
        }
    }
}

/// `CollectiveCommType` of the schema (its numbers), the `comm_type` attribute of a
/// `COMM_COLL_NODE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommType {
    AllReduce = 0,
    Reduce = 1,
    AllGather = 2,
    Gather = 3,
    Scatter = 4,
    Broadcast = 5,
    AllToAll = 6,
    ReduceScatter = 7,
    ReduceScatterBlock = 8,
    Barrier = 9,
}

impl CommType {
    pub const ALL: [CommType; 10] = [
        CommType::AllReduce,
        CommType::Reduce,
        CommType::AllGather,
        CommType::Gather,
        CommType::Scatter,
        CommType::Broadcast,
        CommType::AllToAll,
        CommType::ReduceScatter,
        CommType::ReduceScatterBlock,
        CommType::Barrier,
    ];

    pub fn from_i64(v: i64) -> Option<CommType> {
        CommType::ALL.into_iter().find(|c| *c as i64 == v)
    }

    /// Its name in the schema (`ALL_REDUCE`).
    pub fn name(self) -> &'static str {
        match self {
            CommType::AllReduce => "ALL_REDUCE",
            CommType::Reduce => "REDUCE",
            CommType::AllGather => "ALL_GATHER",
            CommType::Gather => "GATHER",
            CommType::Scatter => "SCATTER",
            CommType::Broadcast => "BROADCAST",
            CommType::AllToAll => "ALL_TO_ALL",
            CommType::ReduceScatter => "REDUCE_SCATTER",
            CommType::ReduceScatterBlock => "REDUCE_SCATTER_BLOCK",
            CommType::Barrier => "BARRIER",
        }
    }

    /// Its key in a scenario's `algorithms` table: the schema's name in lower case
    /// (`all_reduce`).
    pub fn key(self) -> &'static str {
        match self {
            CommType::AllReduce => "all_reduce",
            CommType::Reduce => "reduce",
            CommType::AllGather => "all_gather",
            CommType::Gather => "gather",
            CommType::Scatter => "scatter",
            CommType::Broadcast => "broadcast",
            CommType::AllToAll => "all_to_all",
            CommType::ReduceScatter => "reduce_scatter",
            CommType::ReduceScatterBlock => "reduce_scatter_block",
            CommType::Barrier => "barrier",
        }
    }
}

/// An attribute's value: the integer and string members of `AttributeProto`'s oneof as the
/// schema types them; the others (floating point, lists, bytes) by their field's name.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int32(i32),
    Int64(i64),
    Uint32(u32),
    Uint64(u64),
    Sint32(i32),
    Sint64(i64),
    Fixed32(u32),
    Fixed64(u64),
    Sfixed32(i32),
    Sfixed64(i64),
    Bool(bool),
    Str(String),
    Other(&'static str),
    /// No member of the oneof was set.
    Unset,
}

impl AttrValue {
    /// Any integer member (and `bool_val` as 0 or 1), whatever its protobuf type: traces write
    /// `comm_size` as `int64_val` and `tensor_size` as `uint64_val`, `comm_src` as `int32_val`.
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            AttrValue::Int32(v) | AttrValue::Sint32(v) | AttrValue::Sfixed32(v) => v as i128,
            AttrValue::Int64(v) | AttrValue::Sint64(v) | AttrValue::Sfixed64(v) => v as i128,
            AttrValue::Uint32(v) | AttrValue::Fixed32(v) => v as i128,
            AttrValue::Uint64(v) | AttrValue::Fixed64(v) => v as i128,
            AttrValue::Bool(b) => b as i128,
            _ => return None,
        })
    }

    /// The oneof member's name, for errors.
    pub fn member(&self) -> &'static str {
        match self {
            AttrValue::Int32(_) => "int32_val",
            AttrValue::Int64(_) => "int64_val",
            AttrValue::Uint32(_) => "uint32_val",
            AttrValue::Uint64(_) => "uint64_val",
            AttrValue::Sint32(_) => "sint32_val",
            AttrValue::Sint64(_) => "sint64_val",
            AttrValue::Fixed32(_) => "fixed32_val",
            AttrValue::Fixed64(_) => "fixed64_val",
            AttrValue::Sfixed32(_) => "sfixed32_val",
            AttrValue::Sfixed64(_) => "sfixed64_val",
            AttrValue::Bool(_) => "bool_val",
            AttrValue::Str(_) => "string_val",
            AttrValue::Other(name) => name,
            AttrValue::Unset => "no value",
        }
    }
}

/// `AttributeProto`: a name and a value.
#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    pub name: String,
    pub value: AttrValue,
}

impl Attr {
    pub fn new(name: &str, value: AttrValue) -> Attr {
        Attr { name: name.to_string(), value }
    }
}

/// A `Node` message.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    pub id: u64,
    pub name: String,
    /// The `type` field as written (see [`NodeType::from_i32`]; 0 is `INVALID_NODE`).
    pub node_type: i32,
    pub ctrl_deps: Vec<u64>,
    pub data_deps: Vec<u64>,
    pub start_time_micros: u64,
    pub duration_micros: u64,
    pub attrs: Vec<Attr>,
    /// The file offset of the node's length prefix (0 for a node not read from a file).
    pub offset: u64,
}

impl Node {
    pub fn new(id: u64, name: &str, t: NodeType) -> Node {
        Node { id, name: name.to_string(), node_type: t as i32, ..Node::default() }
    }

    pub fn kind(&self) -> Option<NodeType> {
        NodeType::from_i32(self.node_type)
    }

    /// The last attribute called `name` (protobuf's rule for a repeated key: the last wins).
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().rev().find(|a| a.name == name).map(|a| &a.value)
    }

    pub fn with_attr(mut self, name: &str, value: AttrValue) -> Node {
        self.attrs.push(Attr::new(name, value));
        self
    }
}

/// One rank's file: its `GlobalMetadata.version` and its nodes in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EtFile {
    pub version: String,
    pub nodes: Vec<Node>,
}

/// Decoding errors: the byte offset, the node id when the node's `id` field was read, the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: u64,
    pub node: Option<u64>,
    pub message: String,
}

impl From<WireError> for DecodeError {
    fn from(e: WireError) -> DecodeError {
        DecodeError { offset: e.offset, node: None, message: e.message }
    }
}

fn wrong_type(field: &str, at: u64, v: &Value<'_>, want: &str) -> DecodeError {
    DecodeError {
        offset: at,
        node: None,
        message: format!("field {field} has wire type {}, the schema's is {want}", v.wire_name()),
    }
}

fn string(field: &str, at: u64, v: Value<'_>) -> Result<String, DecodeError> {
    match v {
        // proto3 strings are UTF-8; a name is only shown in messages, so bad bytes are replaced.
        Value::Bytes(b, _) => Ok(String::from_utf8_lossy(b).into_owned()),
        other => Err(wrong_type(field, at, &other, "length-delimited")),
    }
}

fn varint(field: &str, at: u64, v: Value<'_>) -> Result<u64, DecodeError> {
    match v {
        Value::Varint(x) => Ok(x),
        other => Err(wrong_type(field, at, &other, "varint")),
    }
}

/// Reads one rank's file: `GlobalMetadata`, then every `Node`.
pub fn read_et(data: &[u8]) -> Result<EtFile, DecodeError> {
    if data.starts_with(&[0x1F, 0x8B]) {
        return Err(DecodeError { offset: 0, node: None, message: "a gzip file: decompress it first (gunzip)".into() });
    }
    let mut frames = wire::frames(data);
    let Some(first) = frames.next() else {
        return Err(DecodeError { offset: 0, node: None, message: "empty file: no GlobalMetadata message".into() });
    };
    let (_, body_at, body) = first?;
    let mut file = EtFile { version: read_metadata(body, body_at)?, nodes: Vec::new() };
    for f in frames {
        let (at, body_at, body) = f?;
        let mut node = read_node(body, body_at)?;
        node.offset = at;
        file.nodes.push(node);
    }
    Ok(file)
}

fn read_metadata(body: &[u8], base: u64) -> Result<String, DecodeError> {
    let mut r = Reader::new(body, base);
    let mut version = String::new();
    loop {
        let at = r.offset();
        match r.field()? {
            None => return Ok(version),
            Some((1, v)) => version = string("GlobalMetadata.version (1)", at, v)?,
            Some(_) => {}
        }
    }
}

fn read_node(body: &[u8], base: u64) -> Result<Node, DecodeError> {
    let mut r = Reader::new(body, base);
    let mut n = Node::default();
    let mut id = None;
    let res = (|| -> Result<(), DecodeError> {
        loop {
            let at = r.offset();
            let Some((field, v)) = r.field()? else { return Ok(()) };
            match field {
                1 => {
                    n.id = varint("Node.id (1)", at, v)?;
                    id = Some(n.id);
                }
                2 => n.name = string("Node.name (2)", at, v)?,
                // An enum is an int32 on the wire: a negative value is a sign-extended varint.
                3 => n.node_type = varint("Node.type (3)", at, v)? as i32,
                4 => wire::repeated_u64(v, at, &mut n.ctrl_deps)?,
                5 => wire::repeated_u64(v, at, &mut n.data_deps)?,
                6 => n.start_time_micros = varint("Node.start_time_micros (6)", at, v)?,
                7 => n.duration_micros = varint("Node.duration_micros (7)", at, v)?,
                10 => match v {
                    Value::Bytes(b, o) => n.attrs.push(read_attr(b, o)?),
                    other => return Err(wrong_type("Node.attr (10)", at, &other, "length-delimited")),
                },
                _ => {}
            }
        }
    })();
    res.map_err(|mut e| {
        e.node = e.node.or(id);
        e
    })?;
    Ok(n)
}

fn read_attr(body: &[u8], base: u64) -> Result<Attr, DecodeError> {
    let mut r = Reader::new(body, base);
    let mut a = Attr { name: String::new(), value: AttrValue::Unset };
    loop {
        let at = r.offset();
        let Some((field, v)) = r.field()? else { return Ok(a) };
        let int = |v: Value<'_>| varint("AttributeProto value", at, v);
        let f32w = |v: Value<'_>| match v {
            Value::Fixed32(x) => Ok(x),
            other => Err(wrong_type("AttributeProto value", at, &other, "32-bit")),
        };
        let f64w = |v: Value<'_>| match v {
            Value::Fixed64(x) => Ok(x),
            other => Err(wrong_type("AttributeProto value", at, &other, "64-bit")),
        };
        let zigzag = |x: u64| (x >> 1) as i64 ^ -((x & 1) as i64);
        a.value = match field {
            1 => {
                a.name = string("AttributeProto.name (1)", at, v)?;
                continue;
            }
            7 => AttrValue::Int32(int(v)? as i32),
            9 => AttrValue::Int64(int(v)? as i64),
            11 => AttrValue::Uint32(int(v)? as u32),
            13 => AttrValue::Uint64(int(v)?),
            15 => AttrValue::Sint32(zigzag(int(v)?) as i32),
            17 => AttrValue::Sint64(zigzag(int(v)?)),
            19 => AttrValue::Fixed32(f32w(v)?),
            21 => AttrValue::Fixed64(f64w(v)?),
            23 => AttrValue::Sfixed32(f32w(v)? as i32),
            25 => AttrValue::Sfixed64(f64w(v)? as i64),
            27 => AttrValue::Bool(int(v)? != 0),
            29 => AttrValue::Str(string("AttributeProto.string_val (29)", at, v)?),
            3 => AttrValue::Other("double_val"),
            5 => AttrValue::Other("float_val"),
            31 => AttrValue::Other("bytes_val"),
            4..=32 => AttrValue::Other("a list"),
            _ => continue,
        };
    }
}

/// Writes Chakra ET files as the schema and `protolib.encodeMessage` frame them (for tests and
/// the shipped example; the reader is tested against them and against files the official
/// protobuf library writes).
#[derive(Clone, Debug)]
pub struct EtWriter {
    buf: Vec<u8>,
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, (field as u64) << 3 | wire as u64);
}

fn bytes_field(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 0);
    put_varint(out, v);
}

fn framed(out: &mut Vec<u8>, msg: &[u8]) {
    put_varint(out, msg.len() as u64);
    out.extend_from_slice(msg);
}

impl EtWriter {
    /// A file starting with `GlobalMetadata { version }`.
    pub fn new(version: &str) -> EtWriter {
        let mut m = Vec::new();
        bytes_field(&mut m, 1, version.as_bytes());
        let mut buf = Vec::new();
        framed(&mut buf, &m);
        EtWriter { buf }
    }

    /// Appends a node (proto3 style: fields at their default value are left out, repeated
    /// numbers packed).
    pub fn node(&mut self, n: &Node) -> &mut EtWriter {
        let mut m = Vec::new();
        if n.id != 0 {
            varint_field(&mut m, 1, n.id);
        }
        if !n.name.is_empty() {
            bytes_field(&mut m, 2, n.name.as_bytes());
        }
        if n.node_type != 0 {
            varint_field(&mut m, 3, n.node_type as i64 as u64);
        }
        for (field, deps) in [(4, &n.ctrl_deps), (5, &n.data_deps)] {
            if !deps.is_empty() {
                let mut p = Vec::new();
                deps.iter().for_each(|&d| put_varint(&mut p, d));
                bytes_field(&mut m, field, &p);
            }
        }
        if n.start_time_micros != 0 {
            varint_field(&mut m, 6, n.start_time_micros);
        }
        if n.duration_micros != 0 {
            varint_field(&mut m, 7, n.duration_micros);
        }
        for a in &n.attrs {
            let mut am = Vec::new();
            bytes_field(&mut am, 1, a.name.as_bytes());
            let zz = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
            match &a.value {
                AttrValue::Int32(v) => varint_field(&mut am, 7, *v as i64 as u64),
                AttrValue::Int64(v) => varint_field(&mut am, 9, *v as u64),
                AttrValue::Uint32(v) => varint_field(&mut am, 11, *v as u64),
                AttrValue::Uint64(v) => varint_field(&mut am, 13, *v),
                AttrValue::Sint32(v) => varint_field(&mut am, 15, zz(*v as i64)),
                AttrValue::Sint64(v) => varint_field(&mut am, 17, zz(*v)),
                AttrValue::Fixed32(v) => {
                    key(&mut am, 19, 5);
                    am.extend_from_slice(&v.to_le_bytes());
                }
                AttrValue::Fixed64(v) => {
                    key(&mut am, 21, 1);
                    am.extend_from_slice(&v.to_le_bytes());
                }
                AttrValue::Sfixed32(v) => {
                    key(&mut am, 23, 5);
                    am.extend_from_slice(&v.to_le_bytes());
                }
                AttrValue::Sfixed64(v) => {
                    key(&mut am, 25, 1);
                    am.extend_from_slice(&v.to_le_bytes());
                }
                AttrValue::Bool(v) => varint_field(&mut am, 27, *v as u64),
                AttrValue::Str(s) => bytes_field(&mut am, 29, s.as_bytes()),
                AttrValue::Other(_) | AttrValue::Unset => {}
            }
            bytes_field(&mut m, 10, &am);
        }
        framed(&mut self.buf, &m);
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}
