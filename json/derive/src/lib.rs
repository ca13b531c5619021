//! `#[derive(ToJson, FromJson)]` for `sluice_json`, the codec the worker and the page
//! client use instead of serde_json. Use them through `sluice_json`, which re-exports them: the
//! code they generate names `::sluice_json`, so the deriving crate depends on it (a proc-macro
//! crate cannot export the runtime itself).
//!
//! The derives read the type's own `#[serde(...)]` attributes, the ones serde's derives read,
//! so that a type is declared once and both codecs agree on its JSON form. They take only the
//! attributes whose meaning they reproduce exactly and refuse any other at compile time: an
//! attribute one derive honoured and the other ignored would make the two forms drift apart
//! without a word.
//!
//! Supported:
//! - structs with named fields: container `rename_all = "..."`, `default`,
//!   `deny_unknown_fields`; field `rename = "..."`, `default`, `default = "path"`;
//! - enums of unit variants (written as strings): container `rename_all = "..."`; variant
//!   `rename = "..."`;
//! - internally tagged enums of unit and struct variants (`{"type": "name", ...fields}`):
//!   container `tag = "..."`, `rename_all = "..."` (variant names), `rename_all_fields = "..."`;
//!   variant `rename = "..."`; field `rename`, `default`, `default = "path"`. They also get
//!   `sluice_json::TaggedRead` (from `FromJson`: the tag, every variant's name, a reader
//!   of one variant's fields) and `TaggedWrite` (from `ToJson`: a value's variant name and a
//!   writer of its fields), for a message whose tag stands beside fields of its own.
//!
//! Anything else (`flatten`, `skip`, untagged or adjacently tagged enums, ...) is refused.
//!
//! The code generated is what `sluice_json`'s readers and writer expect, the same calls for
//! every type, so that the wasm holds no more than one small reader and writer per type.

mod attrs;
mod codegen;
mod names;
mod shape;
mod tagged;

use proc_macro::TokenStream;
use syn::{DeriveInput, Error};

use shape::Shape;

/// Writes the value as `serde_json::to_string` writes it (`sluice_json::ToJson`).
#[proc_macro_derive(ToJson, attributes(serde))]
pub fn derive_to_json(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    Shape::of(&input)
        .map(|shape| shape.writer(&input))
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// Reads the value with serde's rules (`sluice_json::FromJson`); for a struct also its
/// JSON field names (`sluice_json::StructFields`).
#[proc_macro_derive(FromJson, attributes(serde))]
pub fn derive_from_json(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    Shape::of(&input)
        .map(|shape| shape.reader(&input))
        .unwrap_or_else(Error::into_compile_error)
        .into()
}
