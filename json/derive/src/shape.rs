//! What the attributes and the declaration say about a type's JSON form ([`Shape`]), read
//! once; the impls are written from it (`codegen.rs`, `tagged.rs`).

use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Error, Fields, Ident, Result};

use crate::attrs::{ContainerAttrs, Fallback, FieldAttrs, VariantAttrs};
use crate::names::{check_name, RenameRule};

/// What the attributes and the declaration say about a type's JSON form.
pub(crate) enum Shape {
    Struct {
        fields: Vec<Field>,
        /// `#[serde(default)]` on the struct: an absent field takes the struct's `Default`'s.
        default: bool,
        deny_unknown_fields: bool,
    },
    UnitEnum {
        variants: Vec<Variant>,
    },
    /// `#[serde(tag = "...")]`: each variant an object with the tag and its own fields.
    TaggedEnum {
        tag: String,
        variants: Vec<TaggedVariant>,
    },
}

pub(crate) struct TaggedVariant {
    pub(crate) ident: Ident,
    /// Its name in JSON, the tag's value.
    pub(crate) name: String,
    /// `None` for a unit variant.
    pub(crate) fields: Option<Vec<Field>>,
}

pub(crate) struct Field {
    pub(crate) ident: Ident,
    /// Its name in JSON.
    pub(crate) key: String,
    pub(crate) fallback: Fallback,
    /// Not written when this function of a reference to its value holds.
    pub(crate) skip_if: Option<syn::ExprPath>,
}

pub(crate) struct Variant {
    pub(crate) ident: Ident,
    /// Its name in JSON.
    pub(crate) name: String,
}

impl Shape {
    pub(crate) fn of(input: &DeriveInput) -> Result<Shape> {
        let container = ContainerAttrs::of(&input.attrs)?;
        match &input.data {
            Data::Struct(data) => {
                if container.tag.is_some() || container.rename_all_fields.is_some() {
                    return Err(Error::new_spanned(
                        &input.ident,
                        "`#[serde(tag)]` and `#[serde(rename_all_fields)]` are for enums",
                    ));
                }
                let Fields::Named(named) = &data.fields else {
                    return Err(Error::new_spanned(
                        &input.ident,
                        "ToJson/FromJson can be derived only for structs with named fields; \
                         implement them by hand for this one",
                    ));
                };
                let fields = named_fields(named, container.rename_all)?;
                Ok(Shape::Struct {
                    fields,
                    default: container.default,
                    deny_unknown_fields: container.deny_unknown_fields,
                })
            }
            Data::Enum(data) => {
                if container.default || container.deny_unknown_fields {
                    return Err(Error::new_spanned(
                        &input.ident,
                        "`#[serde(default)]` and `#[serde(deny_unknown_fields)]` are for \
                         structs; an enum of unit variants takes neither",
                    ));
                }
                if data.variants.is_empty() {
                    return Err(Error::new_spanned(
                        &input.ident,
                        "ToJson/FromJson need at least one variant to write",
                    ));
                }
                if let Some(tag) = container.tag {
                    check_name(&tag, input.ident.span())?;
                    let rename_fields = container.rename_all_fields.unwrap_or_default();
                    let mut variants = Vec::new();
                    for variant in &data.variants {
                        let rename = VariantAttrs::of(&variant.attrs)?.rename;
                        let name = match rename {
                            Some(name) => name,
                            None => container
                                .rename_all
                                .variant(&variant.ident.unraw().to_string()),
                        };
                        check_name(&name, variant.span())?;
                        let fields = match &variant.fields {
                            Fields::Unit => None,
                            Fields::Named(named) => Some(named_fields(named, rename_fields)?),
                            Fields::Unnamed(_) => {
                                return Err(Error::new_spanned(
                                    variant,
                                    "a tagged enum's variants must be units or have named \
                                     fields (serde cannot tag a tuple variant's object either)",
                                ))
                            }
                        };
                        variants.push(TaggedVariant {
                            ident: variant.ident.clone(),
                            name,
                            fields,
                        });
                    }
                    return Ok(Shape::TaggedEnum { tag, variants });
                }
                if container.rename_all_fields.is_some() {
                    return Err(Error::new_spanned(
                        &input.ident,
                        "`#[serde(rename_all_fields)]` is for a tagged enum's fields: add \
                         `tag = \"...\"` or drop it",
                    ));
                }
                let mut variants = Vec::new();
                for variant in &data.variants {
                    if !matches!(variant.fields, Fields::Unit) {
                        return Err(Error::new_spanned(
                            variant,
                            "ToJson/FromJson can be derived for enums of unit variants \
                             (written as strings), or for internally tagged enums \
                             (`#[serde(tag = \"...\")]`); this enum's variants carry data \
                             without a tag",
                        ));
                    }
                    let rename = VariantAttrs::of(&variant.attrs)?.rename;
                    let name = match rename {
                        Some(name) => name,
                        None => container
                            .rename_all
                            .variant(&variant.ident.unraw().to_string()),
                    };
                    check_name(&name, variant.span())?;
                    variants.push(Variant {
                        ident: variant.ident.clone(),
                        name,
                    });
                }
                Ok(Shape::UnitEnum { variants })
            }
            Data::Union(_) => Err(Error::new_spanned(
                &input.ident,
                "ToJson/FromJson cannot be derived for a union",
            )),
        }
    }
}

/// A struct's (or a struct variant's) named fields, with their JSON names under `rule`.
fn named_fields(named: &syn::FieldsNamed, rule: RenameRule) -> Result<Vec<Field>> {
    let mut fields = Vec::new();
    for field in &named.named {
        let ident = field.ident.clone().expect("named fields have names");
        let attrs = FieldAttrs::of(&field.attrs)?;
        let key = match attrs.rename {
            Some(name) => name,
            None => rule.field(&ident.unraw().to_string()),
        };
        check_name(&key, field.span())?;
        fields.push(Field {
            ident,
            key,
            fallback: attrs.fallback,
            skip_if: attrs.skip_if,
        });
    }
    Ok(fields)
}
