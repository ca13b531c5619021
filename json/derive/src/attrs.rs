//! The `#[serde(...)]` attributes the derives take, read from a container, a field and a
//! variant; any other is refused here, at compile time.

use quote::quote;
use syn::{Attribute, Error, ExprPath, LitStr, Result};

use crate::names::RenameRule;

/// What an absent field takes (besides an `Option`'s `None`, which the reader knows itself).
pub(crate) enum Fallback {
    /// Nothing: absent is an error (unless the struct has a `default`).
    None,
    /// `#[serde(default)]`: the field type's `Default`.
    Default,
    /// `#[serde(default = "path")]`: what `path()` returns.
    Path(ExprPath),
}

/// The `#[serde(...)]` attributes of a struct or enum.
#[derive(Default)]
pub(crate) struct ContainerAttrs {
    pub(crate) rename_all: RenameRule,
    pub(crate) default: bool,
    pub(crate) deny_unknown_fields: bool,
    /// `tag = "..."`: an internally tagged enum.
    pub(crate) tag: Option<String>,
    pub(crate) rename_all_fields: Option<RenameRule>,
}

impl ContainerAttrs {
    pub(crate) fn of(attrs: &[Attribute]) -> Result<Self> {
        let mut out = ContainerAttrs::default();
        let mut rename_all = None;
        for attr in serde_attrs(attrs) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("rename_all") {
                    let rule: LitStr = meta.value()?.parse()?;
                    set_once(&mut rename_all, RenameRule::from_lit(&rule)?, &meta)
                } else if meta.path.is_ident("default") {
                    if meta.input.peek(syn::Token![=]) {
                        return Err(meta.error(
                            "`#[serde(default = \"...\")]` on a container is not supported by \
                             ToJson/FromJson; implement `Default` and write `#[serde(default)]`",
                        ));
                    }
                    set_flag(&mut out.default, &meta)
                } else if meta.path.is_ident("deny_unknown_fields") {
                    set_flag(&mut out.deny_unknown_fields, &meta)
                } else if meta.path.is_ident("tag") {
                    let tag: LitStr = meta.value()?.parse()?;
                    set_once(&mut out.tag, tag.value(), &meta)
                } else if meta.path.is_ident("rename_all_fields") {
                    let rule: LitStr = meta.value()?.parse()?;
                    set_once(
                        &mut out.rename_all_fields,
                        RenameRule::from_lit(&rule)?,
                        &meta,
                    )
                } else {
                    Err(unsupported(&meta, CONTAINER_SUPPORTED))
                }
            })?;
        }
        out.rename_all = rename_all.unwrap_or_default();
        Ok(out)
    }
}

/// The `#[serde(...)]` attributes of a struct's field.
pub(crate) struct FieldAttrs {
    pub(crate) rename: Option<String>,
    pub(crate) fallback: Fallback,
    /// `#[serde(skip_serializing_if = "path")]`: not written when `path(&value)` holds.
    pub(crate) skip_if: Option<ExprPath>,
}

impl FieldAttrs {
    pub(crate) fn of(attrs: &[Attribute]) -> Result<Self> {
        let mut rename = None;
        let mut fallback = None;
        let mut skip_if = None;
        for attr in serde_attrs(attrs) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("rename") {
                    let name: LitStr = meta.value()?.parse()?;
                    set_once(&mut rename, name.value(), &meta)
                } else if meta.path.is_ident("default") {
                    let value = if meta.input.peek(syn::Token![=]) {
                        let path: LitStr = meta.value()?.parse()?;
                        Fallback::Path(path.parse()?)
                    } else {
                        Fallback::Default
                    };
                    set_once(&mut fallback, value, &meta)
                } else if meta.path.is_ident("skip_serializing_if") {
                    let path: LitStr = meta.value()?.parse()?;
                    set_once(&mut skip_if, path.parse()?, &meta)
                } else {
                    Err(unsupported(&meta, FIELD_SUPPORTED))
                }
            })?;
        }
        Ok(FieldAttrs {
            rename,
            fallback: fallback.unwrap_or(Fallback::None),
            skip_if,
        })
    }
}

/// The `#[serde(...)]` attributes of an enum's variant.
pub(crate) struct VariantAttrs {
    pub(crate) rename: Option<String>,
}

impl VariantAttrs {
    pub(crate) fn of(attrs: &[Attribute]) -> Result<Self> {
        let mut rename = None;
        for attr in serde_attrs(attrs) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("rename") {
                    let name: LitStr = meta.value()?.parse()?;
                    set_once(&mut rename, name.value(), &meta)
                } else {
                    Err(unsupported(&meta, VARIANT_SUPPORTED))
                }
            })?;
        }
        Ok(VariantAttrs { rename })
    }
}

const CONTAINER_SUPPORTED: &str = "On a struct or enum they take `rename_all = \"...\"`, \
     `default`, `deny_unknown_fields`; on an enum also `tag = \"...\"` and \
     `rename_all_fields = \"...\"`";
const FIELD_SUPPORTED: &str = "On a field they take `rename = \"...\"`, `default`, \
     `default = \"path\"`, `skip_serializing_if = \"path\"`";
const VARIANT_SUPPORTED: &str = "On a variant they take `rename = \"...\"`";

fn serde_attrs(attrs: &[Attribute]) -> impl Iterator<Item = &Attribute> {
    attrs.iter().filter(|attr| attr.path().is_ident("serde"))
}

/// The error for a serde attribute these derives do not reproduce.
fn unsupported(meta: &syn::meta::ParseNestedMeta, supported: &str) -> Error {
    let path = &meta.path;
    let name = quote!(#path).to_string().replace(' ', "");
    meta.error(format!(
        "`#[serde({name})]` is not supported by ToJson/FromJson, so serde and \
         `sluice_json` would read or write this type differently. {supported}. Drop \
         the attribute, or implement ToJson/FromJson by hand"
    ))
}

fn set_once<T>(slot: &mut Option<T>, value: T, meta: &syn::meta::ParseNestedMeta) -> Result<()> {
    if slot.is_some() {
        return Err(meta.error("this serde attribute is given twice"));
    }
    *slot = Some(value);
    Ok(())
}

fn set_flag(flag: &mut bool, meta: &syn::meta::ParseNestedMeta) -> Result<()> {
    if *flag {
        return Err(meta.error("this serde attribute is given twice"));
    }
    *flag = true;
    Ok(())
}
