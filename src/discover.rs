//! `rpc.discover`: an OpenRPC 1.3 document of an [`Api`], with JSON Schema (draft-07)
//! schemas made from the contract types by schemars.
//!
//! The document lists the methods this side serves, the methods the other side serves
//! (marked `"x-implemented-by": ["client"]`, the extension open-rpc/server-js uses for
//! methods a server calls on its WebSocket clients) and the notifications each side
//! sends, as methods without a `result` (the ones this side sends are handled by the
//! other side, so they carry the same marker). Schemas shared by several entries are
//! in `components.schemas`.
//!
//! A method both sides handle is one entry, marked `"x-implemented-by": ["server",
//! "client"]`, described by the first of its contracts given.
//!
//! Params are described as this crate reads them: a struct's fields are one content
//! descriptor each, in declaration order, with `"paramStructure": "either"` (a derived
//! struct reads named and positional params alike; a field is `"required": false` when
//! it and every field after it may be left out, by name and by position alike); a
//! tuple's elements are positional (`"by-position"`; its trailing `Option`s, which the
//! router reads when left out, not required); `()` takes none. One value that may be
//! other than an object and reads no sequence (an `i64`, a `String`, an enum, an
//! untagged enum of a number or a string, an `Option` of one) goes in a one-element
//! array (`[5]`, as the router reads it and typed calls send it): one positional
//! descriptor, `arg0`. Any other params type (a `Vec`, a map) is described whole, as
//! one descriptor named `params` with `"x-params": "whole"`: the params value itself
//! has that schema.

use std::sync::Arc;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde::de::{self, DeserializeOwned, Visitor};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::contract::{Api, Kind, Method, Notification, Side};
use crate::error::RpcError;
use crate::router::Router;

/// The OpenRPC version the document follows.
pub const OPENRPC_VERSION: &str = "1.3.2";

/// Where shared schemas go, and so what their `$ref`s point at.
const COMPONENTS: &str = "/components/schemas";

/// An entry's schemas, made with the document's one generator.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> EntrySchema;

pub(crate) struct EntrySchema {
    params: Schema,
    /// A struct's fields in declaration order, as serde reads them.
    fields: Option<&'static [&'static str]>,
    /// How the router reads params of one value, for a type that reads no sequence.
    one: OneValue,
    result: Option<Schema>,
}

/// Whether params are one value that goes in a one-element array (`[5]`, `["fast"]`:
/// the router reads them so, and typed calls send them so), and whether that value may
/// be left out.
#[derive(Clone, Copy)]
struct OneValue {
    positional: bool,
    optional: bool,
}

fn one_value<P: DeserializeOwned>() -> OneValue {
    OneValue {
        positional: crate::router::reads_no_sequence::<P>()
            || crate::router::untagged_of_no_sequence::<P>(),
        optional: crate::router::reads_absent_params::<P>(),
    }
}

pub(crate) fn method_schema<M: Method>(generator: &mut SchemaGenerator) -> EntrySchema
where
    M::Params: JsonSchema,
    M::Result: JsonSchema,
{
    EntrySchema {
        params: generator.subschema_for::<M::Params>(),
        fields: struct_fields::<M::Params>(),
        one: one_value::<M::Params>(),
        result: Some(generator.subschema_for::<M::Result>()),
    }
}

pub(crate) fn notification_schema<N: Notification>(generator: &mut SchemaGenerator) -> EntrySchema
where
    N::Params: JsonSchema,
{
    EntrySchema {
        params: generator.subschema_for::<N::Params>(),
        fields: struct_fields::<N::Params>(),
        one: one_value::<N::Params>(),
        result: None,
    }
}

impl Api {
    /// The OpenRPC 1.3 document of this description, as `rpc.discover` answers it.
    ///
    /// ```
    /// use jsonrpc_peer::Api;
    /// jsonrpc_peer::method!(Subtract = "subtract", (i64, i64) => i64);
    ///
    /// let doc = Api::new("calc", "1.0.0").serves(Subtract).openrpc();
    /// assert_eq!(doc["info"]["title"], "calc");
    /// assert_eq!(doc["methods"][0]["name"], "subtract");
    /// assert_eq!(doc["methods"][0]["paramStructure"], "by-position");
    /// ```
    pub fn openrpc(&self) -> Value {
        let mut generator = SchemaSettings::draft07()
            .with(|s| s.definitions_path = COMPONENTS.into())
            .into_generator();
        let mut methods: Vec<Map<String, Value>> = Vec::with_capacity(self.entries.len());
        for entry in &self.entries {
            let other_side_handles = match entry.kind {
                Kind::Method => entry.side == Side::Other,
                Kind::Notification => entry.side == Side::This,
            };
            // A name both sides handle (`serves(Ping).expects(Ping)`) is one method:
            // OpenRPC's names are unique. It is described as first given.
            if let Some(first) = methods
                .iter_mut()
                .find(|m| m["name"].as_str() == Some(entry.name))
            {
                if first.contains_key("x-implemented-by") != other_side_handles {
                    first.insert("x-implemented-by".into(), json!(["server", "client"]));
                }
                continue;
            }
            let schema = (entry.schema)(&mut generator);
            let mut method = Map::new();
            method.insert("name".into(), entry.name.into());
            describe_params(&mut generator, &schema, &mut method);
            if let Some(mut result) = schema.result {
                transform(&mut generator, &mut result);
                method.insert(
                    "result".into(),
                    json!({"name": "result", "schema": result.to_value()}),
                );
            }
            if other_side_handles {
                method.insert("x-implemented-by".into(), json!(["client"]));
            }
            if entry.kind == Kind::Notification {
                method.insert("x-notification".into(), true.into());
            }
            methods.push(method);
        }
        let mut info = Map::new();
        info.insert("title".into(), self.name.clone().into());
        info.insert("version".into(), self.version.clone().into());
        if let Some(description) = &self.description {
            info.insert("description".into(), description.clone().into());
        }
        let schemas = generator.take_definitions(true);
        let mut doc = json!({
            "openrpc": OPENRPC_VERSION,
            "info": info,
            "methods": methods,
        });
        if !schemas.is_empty() {
            doc["components"] = json!({ "schemas": schemas });
        }
        doc
    }
}

fn transform(generator: &mut SchemaGenerator, schema: &mut Schema) {
    for t in generator.transforms_mut() {
        t.transform(schema);
    }
}

/// The schema a `$ref` into the components points at, or the schema itself.
fn resolve(generator: &mut SchemaGenerator, schema: &Schema) -> Schema {
    let target = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(&format!("#{COMPONENTS}/")))
        .and_then(|name| generator.definitions().get(name).cloned())
        .and_then(|value| Schema::try_from(value).ok());
    let mut resolved = target.unwrap_or_else(|| schema.clone());
    transform(generator, &mut resolved);
    resolved
}

fn describe_params(
    generator: &mut SchemaGenerator,
    schema: &EntrySchema,
    method: &mut Map<String, Value>,
) {
    let (params, fields, one) = (&schema.params, schema.fields, schema.one);
    let resolved = resolve(generator, params);
    let is = |t: &str| resolved.get("type").and_then(Value::as_str) == Some(t);
    let (descriptors, structure) = if is("null") {
        (Vec::new(), "either")
    } else if let (true, Some(Value::Object(properties))) =
        (is("object"), resolved.get("properties"))
    {
        let required: Vec<&str> = resolved
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut names: Vec<&str> = match fields {
            Some(fields) => fields
                .iter()
                .copied()
                .filter(|f| properties.contains_key(*f))
                .collect(),
            None => Vec::new(),
        };
        for name in properties.keys() {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        // Positional params fill fields in declaration order: only known for a derived
        // struct whose fields serde lists (not one that flattens another).
        let by_position = fields.is_some();
        // OpenRPC lists the optional params after the required ones. By position, an
        // optional field before a required one must be given (`null` for none): it is
        // required. By name only, the order is free: required ones first.
        let last_required = names.iter().rposition(|name| required.contains(name));
        if !by_position {
            names.sort_by_key(|name| !required.contains(name));
        }
        let descriptors = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let needed = if by_position {
                    last_required.is_some_and(|last| i <= last)
                } else {
                    required.contains(name)
                };
                json!({
                    "name": name,
                    "schema": properties.get(*name).cloned().unwrap_or(Value::Bool(true)),
                    "required": needed,
                })
            })
            .collect();
        let structure = if by_position { "either" } else { "by-name" };
        (descriptors, structure)
    } else if let (true, Some(Value::Array(items))) = (is("array"), resolved.get("items")) {
        // Positional params short of a tuple's length are read with `null`s after them:
        // trailing elements that take `null` (`Option`s) may be left out. The first is
        // needed all the same (`[]` reads as absent params, which a tuple does not).
        let optional_from = items
            .iter()
            .rposition(|item| !nullable(generator, item, 0))
            .map_or(1, |last| last + 1)
            .max(1);
        let descriptors = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                json!({"name": format!("arg{i}"), "schema": item, "required": i < optional_from})
            })
            .collect();
        (descriptors, "by-position")
    } else if one.positional && !objects_only(generator, resolved.as_value(), 0) {
        // One value that may be other than an object (a number, a string, an enum with
        // unit variants, an untagged enum of a number or a string): params are never a
        // bare scalar, so it goes as `[value]`. (One that is always an object, an
        // untagged enum of structs, is still described whole: it goes as it is.)
        let mut value = params.clone();
        transform(generator, &mut value);
        let descriptor =
            json!({"name": "arg0", "schema": value.to_value(), "required": !one.optional});
        (vec![descriptor], "by-position")
    } else {
        let mut whole = params.clone();
        transform(generator, &mut whole);
        method.insert("x-params".into(), "whole".into());
        let descriptor = json!({"name": "params", "schema": whole.to_value(), "required": true});
        (vec![descriptor], "by-position")
    };
    method.insert("params".into(), Value::Array(descriptors));
    method.insert("paramStructure".into(), structure.into());
}

/// For a schema that is a `$ref` into the components: the schema it names (`None`
/// when the components have no such name); `None` outright for any other schema.
fn referenced<'g>(
    generator: &'g SchemaGenerator,
    schema: &Map<String, Value>,
) -> Option<Option<&'g Value>> {
    let name = schema
        .get("$ref")
        .and_then(Value::as_str)?
        .strip_prefix(&format!("#{COMPONENTS}/"))?;
    Some(generator.definitions().get(name))
}

/// Whether every value of `schema` is an object (following `$ref`s a few deep).
fn objects_only(generator: &SchemaGenerator, schema: &Value, depth: u8) -> bool {
    let Value::Object(schema) = schema else {
        return false;
    };
    if depth > 8 {
        return false;
    }
    if let Some(target) = referenced(generator, schema) {
        return target.is_some_and(|target| objects_only(generator, target, depth + 1));
    }
    if let Some(t) = schema.get("type") {
        return t == "object";
    }
    let each = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_array)
            .filter(|all| !all.is_empty())
            .map(|all| all.iter().all(|s| objects_only(generator, s, depth + 1)))
    };
    if let Some(all) = each("anyOf").or_else(|| each("oneOf")) {
        return all;
    }
    // allOf: every value meets each, so one that is objects only is enough.
    schema
        .get("allOf")
        .and_then(Value::as_array)
        .is_some_and(|all| all.iter().any(|s| objects_only(generator, s, depth + 1)))
}

/// Whether a value of `schema` may be `null` (an `Option`, `()`, any value), following
/// `$ref`s into the components a few deep.
fn nullable(generator: &SchemaGenerator, schema: &Value, depth: u8) -> bool {
    let Value::Object(schema) = schema else {
        return schema == &Value::Bool(true);
    };
    if depth > 8 {
        return false;
    }
    if let Some(target) = referenced(generator, schema) {
        return target.is_some_and(|target| nullable(generator, target, depth + 1));
    }
    match schema.get("type") {
        Some(Value::String(t)) => return t == "null",
        Some(Value::Array(types)) => return types.iter().any(|t| t == "null"),
        _ => {}
    }
    let any = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_array)
            .map(|all| all.iter().any(|s| nullable(generator, s, depth + 1)))
    };
    if let Some(found) = any("anyOf").or_else(|| any("oneOf")) {
        return found;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        return values.contains(&Value::Null);
    }
    if let Some(value) = schema.get("const") {
        return value.is_null();
    }
    // No constraint on the value's kind (`{}`, a description alone): any value.
    !schema.contains_key("allOf") && !schema.contains_key("not")
}

/// The field names serde reads a struct with, in declaration order: asks `P` to
/// deserialize from a deserializer that only notes what it is asked for.
fn struct_fields<P: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut seen = None;
    let _ = P::deserialize(FieldNames { seen: &mut seen });
    seen
}

struct FieldNames<'a> {
    seen: &'a mut Option<&'static [&'static str]>,
}

#[derive(Debug)]
struct Noted;

impl std::fmt::Display for Noted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("only the shape was asked for")
    }
}

impl std::error::Error for Noted {}

impl de::Error for Noted {
    fn custom<T: std::fmt::Display>(_msg: T) -> Self {
        Noted
    }
}

impl<'de> de::Deserializer<'de> for FieldNames<'_> {
    type Error = Noted;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Noted> {
        Err(Noted)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Noted> {
        *self.seen = Some(fields);
        Err(Noted)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// The document, serialized once and shared by every answer.
#[derive(Clone)]
struct Document(Arc<RawValue>);

impl Serialize for Document {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<S: Send + Sync + 'static> Router<S> {
    /// Serves `rpc.discover`, answering with [`api`'s OpenRPC document](Api::openrpc),
    /// built here once. (`rpc.` names are reserved by the specification, and
    /// [`method`](Self::method) refuses them; OpenRPC names this one.)
    ///
    /// Check the router against the same description first with [`Api::check`].
    ///
    /// ```
    /// use jsonrpc_peer::{Api, Router};
    /// jsonrpc_peer::method!(Subtract = "subtract", (i64, i64) => i64);
    ///
    /// let api = Api::new("calc", "1.0.0").serves(Subtract);
    /// let router = Router::new()
    ///     .handle(Subtract, |_cx, (a, b)| async move { Ok(a - b) })
    ///     .discover(&api);
    /// api.check(&router).unwrap();
    /// assert!(router.has_method("rpc.discover"));
    /// ```
    ///
    /// # Panics
    ///
    /// If `rpc.discover` is already served.
    pub fn discover(self, api: &Api) -> Self {
        // A `Value` always serializes: its keys are strings.
        let raw = serde_json::value::to_raw_value(&api.openrpc()).unwrap_or_default();
        let document = Document(Arc::from(raw));
        // `method` refuses `rpc.` names: this crate serves the one it defines.
        self.serve("rpc.discover", move |_cx, (): ()| {
            let document = document.clone();
            async move { Ok::<_, RpcError>(document) }
        })
    }
}
