//! Params of a typed contract as the router reads them: a contract whose params are
//! one value that is not an array or object (`i64`, a `String`, an enum's unit
//! variant) is served from a one-element array (`[21]`, see `Router`'s table), so its
//! typed calls and notifications send it so. Without this, `request(Double, &21)`
//! failed with `Error::InvalidParams` (params must be an array or object) while the
//! same contract's handler took `[21]`, and an enum's call failed or went through by
//! variant (`"fast"` refused, `{"exact":{..}}` sent).
//!
//! A serializer wrapper, so nothing is serialized twice: every scalar at the top goes
//! out as a one-element array; arrays, objects and null (absent params) as they are.

use serde::ser::{Serialize, SerializeTuple, Serializer};

/// `params`, with a top-level scalar sent as `[value]` when `positional`.
pub(crate) struct Params<'a, P: ?Sized> {
    pub positional: bool,
    pub params: &'a P,
}

impl<P: Serialize + ?Sized> Serialize for Params<'_, P> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.positional {
            self.params.serialize(Wrap(s))
        } else {
            self.params.serialize(s)
        }
    }
}

/// A typed contract's params (see the module docs).
pub(crate) fn typed<P: ?Sized>(params: &P) -> Params<'_, P> {
    Params {
        positional: true,
        params,
    }
}

struct Wrap<S>(S);

/// `value` as a one-element array.
fn one<S: Serializer, T: Serialize + ?Sized>(s: S, value: &T) -> Result<S::Ok, S::Error> {
    let mut tuple = s.serialize_tuple(1)?;
    tuple.serialize_element(value)?;
    tuple.end()
}

/// An enum's unit variant, serialized again inside the array.
struct UnitVariant {
    name: &'static str,
    index: u32,
    variant: &'static str,
}

impl Serialize for UnitVariant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_unit_variant(self.name, self.index, self.variant)
    }
}

macro_rules! wrapped {
    ($($method:ident($t:ty)),* $(,)?) => {
        $(fn $method(self, v: $t) -> Result<S::Ok, S::Error> {
            one(self.0, &v)
        })*
    };
}

impl<S: Serializer> Serializer for Wrap<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = S::SerializeSeq;
    type SerializeTuple = S::SerializeTuple;
    type SerializeTupleStruct = S::SerializeTupleStruct;
    type SerializeTupleVariant = S::SerializeTupleVariant;
    type SerializeMap = S::SerializeMap;
    type SerializeStruct = S::SerializeStruct;
    type SerializeStructVariant = S::SerializeStructVariant;

    wrapped!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
    );

    fn serialize_bytes(self, v: &[u8]) -> Result<S::Ok, S::Error> {
        self.0.serialize_bytes(v) // an array already
    }

    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }

    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_struct(name)
    }

    fn serialize_unit_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        one(
            self.0,
            &UnitVariant {
                name,
                index,
                variant,
            },
        )
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, index, variant, value)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len)
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len)
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len)
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0.serialize_tuple_variant(name, index, variant, len)
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len)
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len)
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0.serialize_struct_variant(name, index, variant, len)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

#[cfg(test)]
mod tests {
    use super::typed;
    use serde::Serialize;

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Fast,
        Exact { digits: u32 },
    }

    #[derive(Serialize)]
    struct Wrapped(i64);

    fn text<T: Serialize + ?Sized>(v: &T) -> String {
        serde_json::to_string(&typed(v)).unwrap()
    }

    #[test]
    fn scalars_go_in_a_one_element_array_the_rest_as_they_are() {
        assert_eq!(text(&21), "[21]");
        assert_eq!(text("hi"), r#"["hi"]"#);
        assert_eq!(text(&true), "[true]");
        assert_eq!(text(&Mode::Fast), r#"["fast"]"#);
        assert_eq!(text(&Some(5)), "[5]");
        assert_eq!(text(&Wrapped(7)), "[7]");
        assert_eq!(
            text(&Mode::Exact { digits: 3 }),
            r#"{"exact":{"digits":3}}"#
        );
        assert_eq!(text(&(1, 2)), "[1,2]");
        assert_eq!(text(&vec![3]), "[3]");
        assert_eq!(text(&None::<i64>), "null");
        assert_eq!(text(&()), "null");
        assert_eq!(text(&serde_json::json!({"a": 1})), r#"{"a":1}"#);
    }
}
