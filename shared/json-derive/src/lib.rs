//! `#[derive(ToJson, FromJson)]` for `sluice_shared::json`, the codec the worker and the page
//! client use instead of serde_json.
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
//!   `sluice_shared::json::TaggedRead` (from `FromJson`: the tag, every variant's name, a reader
//!   of one variant's fields) and `TaggedWrite` (from `ToJson`: a value's variant name and a
//!   writer of its fields), for a message whose tag stands beside fields of its own.
//!
//! Anything else (`flatten`, `skip`, untagged or adjacently tagged enums, ...) is refused.
//!
//! The code generated is what the `json` module's readers and writer expect, the same calls for
//! every type, so that the wasm holds no more than one small reader and writer per type.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Error, ExprPath, Fields, Ident, LitStr, Result};

/// Writes the value as `serde_json::to_string` writes it (`sluice_shared::json::ToJson`).
#[proc_macro_derive(ToJson, attributes(serde))]
pub fn derive_to_json(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    Shape::of(&input)
        .map(|shape| shape.writer(&input))
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// Reads the value with serde's rules (`sluice_shared::json::FromJson`); for a struct also its
/// JSON field names (`sluice_shared::json::StructFields`).
#[proc_macro_derive(FromJson, attributes(serde))]
pub fn derive_from_json(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as DeriveInput);
    Shape::of(&input)
        .map(|shape| shape.reader(&input))
        .unwrap_or_else(Error::into_compile_error)
        .into()
}

/// What the attributes and the declaration say about a type's JSON form.
enum Shape {
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

struct TaggedVariant {
    ident: Ident,
    /// Its name in JSON, the tag's value.
    name: String,
    /// `None` for a unit variant.
    fields: Option<Vec<Field>>,
}

struct Field {
    ident: Ident,
    /// Its name in JSON.
    key: String,
    fallback: Fallback,
}

/// What an absent field takes (besides an `Option`'s `None`, which the reader knows itself).
enum Fallback {
    /// Nothing: absent is an error (unless the struct has a `default`).
    None,
    /// `#[serde(default)]`: the field type's `Default`.
    Default,
    /// `#[serde(default = "path")]`: what `path()` returns.
    Path(ExprPath),
}

struct Variant {
    ident: Ident,
    /// Its name in JSON.
    name: String,
}

impl Shape {
    fn of(input: &DeriveInput) -> Result<Shape> {
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

    /// The `ToJson` impl.
    fn writer(&self, input: &DeriveInput) -> TokenStream2 {
        let name = &input.ident;
        let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
        let body = match self {
            Shape::Struct { fields, .. } if fields.is_empty() => quote! { out.push_str("{}"); },
            Shape::Struct { fields, .. } => {
                // `{"first":` then `,"next":` for each further field: one `push_str` of a
                // constant per field, as serde_json writes them.
                let writes = fields.iter().enumerate().map(|(i, field)| {
                    let opening = if i == 0 { "{\"" } else { ",\"" };
                    let prefix = format!("{opening}{}\":", field.key);
                    let ident = &field.ident;
                    quote! {
                        out.push_str(#prefix);
                        ::sluice_shared::json::ToJson::write_json(&self.#ident, out);
                    }
                });
                quote! {
                    #(#writes)*
                    out.push('}');
                }
            }
            Shape::UnitEnum { variants } => {
                let arms = variants.iter().map(|variant| {
                    let ident = &variant.ident;
                    let quoted = format!("\"{}\"", variant.name);
                    quote! { #name::#ident => #quoted, }
                });
                quote! { out.push_str(match self { #(#arms)* }); }
            }
            Shape::TaggedEnum { tag, variants } => {
                return tagged_writer(input, tag, variants);
            }
        };
        quote! {
            impl #impl_generics ::sluice_shared::json::ToJson for #name #type_generics #where_clause {
                fn write_json(&self, out: &mut ::std::string::String) {
                    #body
                }
            }
        }
    }

    /// The `FromJson` impl (and for a struct `StructFields`).
    fn reader(&self, input: &DeriveInput) -> TokenStream2 {
        let name = &input.ident;
        let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
        let json = quote! { ::sluice_shared::json };
        match self {
            Shape::Struct {
                fields,
                default,
                deny_unknown_fields,
            } => {
                let keys = fields.iter().map(|field| &field.key);
                // serde's words for anything but an object.
                let expected = format!("struct {name}");
                let deny = deny_unknown_fields.then(|| {
                    quote! { r.deny_unknown(<Self as #json::StructFields>::FIELDS); }
                });
                let reads: Vec<TokenStream2> = fields
                    .iter()
                    .map(|field| {
                        let ident = &field.ident;
                        let key = &field.key;
                        // serde: a field's own default wins over the struct's.
                        match (&field.fallback, default) {
                            (Fallback::Path(path), _) => quote! { r.field_or(#key, #path()) },
                            (Fallback::Default, _) => quote! {
                                r.field_or(#key, ::core::default::Default::default())
                            },
                            (Fallback::None, true) => quote! { r.field_or(#key, d.#ident) },
                            (Fallback::None, false) => quote! { r.field(#key) },
                        }
                    })
                    .collect();
                let uses_struct_default = *default
                    && fields
                        .iter()
                        .any(|field| matches!(field.fallback, Fallback::None));
                let struct_default = uses_struct_default.then(|| {
                    quote! { let d = <Self as ::core::default::Default>::default(); }
                });
                let idents = fields.iter().map(|field| &field.ident);
                quote! {
                    impl #impl_generics #json::StructFields for #name #type_generics #where_clause {
                        const FIELDS: &'static [&'static str] = &[#(#keys),*];
                    }

                    impl #impl_generics #json::FromJson for #name #type_generics #where_clause {
                        fn from_json(
                            v: &#json::Json,
                        ) -> ::core::result::Result<Self, #json::Error> {
                            let mut r = #json::Fields::of(v, #expected);
                            #deny
                            #struct_default
                            let out = Self {
                                #(#idents: #reads,)*
                            };
                            r.finish()?;
                            ::core::result::Result::Ok(out)
                        }
                    }
                }
            }
            Shape::TaggedEnum { tag, variants } => tagged_reader(input, tag, variants),
            Shape::UnitEnum { variants } => {
                let arms = variants.iter().map(|variant| {
                    let ident = &variant.ident;
                    let text = &variant.name;
                    quote! { ::core::option::Option::Some(#text) => ::core::result::Result::Ok(#name::#ident), }
                });
                let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
                // serde's message, with `{}` for the name found (braces in names doubled).
                let unknown = format!(
                    "unknown variant `{{}}`, expected {}",
                    one_of(&names).replace('{', "{{").replace('}', "}}")
                );
                quote! {
                    impl #impl_generics #json::FromJson for #name #type_generics #where_clause {
                        fn from_json(
                            v: &#json::Json,
                        ) -> ::core::result::Result<Self, #json::Error> {
                            match v.as_str() {
                                #(#arms)*
                                ::core::option::Option::Some(other) => ::core::result::Result::Err(
                                    #json::Error(::std::format!(#unknown, other)),
                                ),
                                // serde_json's words for a unit variant that is not a string.
                                ::core::option::Option::None => ::core::result::Result::Err(
                                    #json::Error(::core::convert::Into::into("expected value")),
                                ),
                            }
                        }
                    }
                }
            }
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
        });
    }
    Ok(fields)
}

/// How an absent field of a tagged variant is read (a variant has no `Default` of its own).
fn field_read(field: &Field) -> TokenStream2 {
    let key = &field.key;
    match &field.fallback {
        Fallback::Path(path) => quote! { r.field_or(#key, #path()) },
        Fallback::Default => quote! { r.field_or(#key, ::core::default::Default::default()) },
        Fallback::None => quote! { r.field(#key) },
    }
}

/// `ToJson` and `TaggedWrite` for a tagged enum: `{"<tag>":"<name>"`, then `,"key":value` per
/// field, then `}`, as serde_json writes it.
fn tagged_writer(input: &DeriveInput, tag: &str, variants: &[TaggedVariant]) -> TokenStream2 {
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let json = quote! { ::sluice_shared::json };
    let names = variants.iter().map(|variant| {
        let ident = &variant.ident;
        let text = &variant.name;
        match variant.fields {
            None => quote! { #name::#ident => #text, },
            Some(_) => quote! { #name::#ident { .. } => #text, },
        }
    });
    let writes = variants.iter().map(|variant| {
        let ident = &variant.ident;
        match &variant.fields {
            None => quote! { #name::#ident => {} },
            Some(fields) => {
                let idents: Vec<&Ident> = fields.iter().map(|f| &f.ident).collect();
                let keys = fields.iter().map(|f| &f.key);
                quote! {
                    #name::#ident { #(#idents),* } => {
                        #(#json::write_field(out, #keys, #idents);)*
                    }
                }
            }
        }
    });
    quote! {
        impl #impl_generics #json::TaggedWrite for #name #type_generics #where_clause {
            fn variant_name(&self) -> &'static str {
                match self { #(#names)* }
            }

            fn write_variant_fields(&self, out: &mut ::std::string::String) {
                match self { #(#writes)* }
            }
        }

        impl #impl_generics #json::ToJson for #name #type_generics #where_clause {
            fn write_json(&self, out: &mut ::std::string::String) {
                #json::open_tagged(out, #tag, #json::TaggedWrite::variant_name(self));
                #json::TaggedWrite::write_variant_fields(self, out);
                out.push('}');
            }
        }
    }
}

/// `FromJson` and `TaggedRead` for a tagged enum, with serde's rules and words.
fn tagged_reader(input: &DeriveInput, tag: &str, variants: &[TaggedVariant]) -> TokenStream2 {
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let json = quote! { ::sluice_shared::json };
    let texts: Vec<&String> = variants.iter().map(|v| &v.name).collect();
    let expected = format!("internally tagged enum {name}");
    let arms = variants.iter().map(|variant| {
        let ident = &variant.ident;
        let text = &variant.name;
        match &variant.fields {
            None => quote! { #text => #name::#ident, },
            Some(fields) => {
                let idents = fields.iter().map(|f| &f.ident);
                let reads = fields.iter().map(field_read);
                quote! { #text => #name::#ident { #(#idents: #reads,)* }, }
            }
        }
    });
    quote! {
        impl #impl_generics #json::TaggedRead for #name #type_generics #where_clause {
            const TAG: &'static str = #tag;
            const VARIANTS: &'static [&'static str] = &[#(#texts),*];

            fn read_variant(
                name: &str,
                r: &mut #json::Fields<'_, '_>,
            ) -> ::core::option::Option<Self> {
                ::core::option::Option::Some(match name {
                    #(#arms)*
                    _ => return ::core::option::Option::None,
                })
            }
        }

        impl #impl_generics #json::FromJson for #name #type_generics #where_clause {
            fn from_json(v: &#json::Json) -> ::core::result::Result<Self, #json::Error> {
                let (name, mut r) = #json::tagged(v, #tag, #expected)?;
                let Some(out) = <Self as #json::TaggedRead>::read_variant(name, &mut r) else {
                    return ::core::result::Result::Err(#json::unknown_variant(
                        name,
                        <Self as #json::TaggedRead>::VARIANTS,
                    ));
                };
                r.finish()?;
                ::core::result::Result::Ok(out)
            }
        }
    }
}

/// Names are pasted into the output between quotes as they are: one that JSON would escape
/// would be written wrong, so it is refused (none needs one).
fn check_name(name: &str, span: proc_macro2::Span) -> Result<()> {
    if name
        .chars()
        .any(|c| c == '"' || c == '\\' || c.is_control())
    {
        return Err(Error::new(
            span,
            format!(
                "the JSON name {name:?} needs escaping, which ToJson does not do; choose a \
                 name without quotes, backslashes or control characters"
            ),
        ));
    }
    Ok(())
}

/// serde's words for the names it expected: "`a`", "`a` or `b`", "one of `a`, `b`, `c`".
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.as_slice() {
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        more => format!("one of {}", more.join(", ")),
    }
}

/// The `#[serde(...)]` attributes of a struct or enum.
#[derive(Default)]
struct ContainerAttrs {
    rename_all: RenameRule,
    default: bool,
    deny_unknown_fields: bool,
    /// `tag = "..."`: an internally tagged enum.
    tag: Option<String>,
    rename_all_fields: Option<RenameRule>,
}

impl ContainerAttrs {
    fn of(attrs: &[Attribute]) -> Result<Self> {
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
struct FieldAttrs {
    rename: Option<String>,
    fallback: Fallback,
}

impl FieldAttrs {
    fn of(attrs: &[Attribute]) -> Result<Self> {
        let mut rename = None;
        let mut fallback = None;
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
                } else {
                    Err(unsupported(&meta, FIELD_SUPPORTED))
                }
            })?;
        }
        Ok(FieldAttrs {
            rename,
            fallback: fallback.unwrap_or(Fallback::None),
        })
    }
}

/// The `#[serde(...)]` attributes of an enum's variant.
struct VariantAttrs {
    rename: Option<String>,
}

impl VariantAttrs {
    fn of(attrs: &[Attribute]) -> Result<Self> {
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
const FIELD_SUPPORTED: &str =
    "On a field they take `rename = \"...\"`, `default`, `default = \"path\"`";
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
         `sluice_shared::json` would read or write this type differently. {supported}. Drop \
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

/// serde's `rename_all` rules, as serde_derive applies them (its `case.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum RenameRule {
    /// Names as declared.
    #[default]
    None,
    LowerCase,
    UpperCase,
    PascalCase,
    CamelCase,
    SnakeCase,
    ScreamingSnakeCase,
    KebabCase,
    ScreamingKebabCase,
}

impl RenameRule {
    const ALL: [(&'static str, RenameRule); 8] = [
        ("lowercase", RenameRule::LowerCase),
        ("UPPERCASE", RenameRule::UpperCase),
        ("PascalCase", RenameRule::PascalCase),
        ("camelCase", RenameRule::CamelCase),
        ("snake_case", RenameRule::SnakeCase),
        ("SCREAMING_SNAKE_CASE", RenameRule::ScreamingSnakeCase),
        ("kebab-case", RenameRule::KebabCase),
        ("SCREAMING-KEBAB-CASE", RenameRule::ScreamingKebabCase),
    ];

    fn from_lit(lit: &LitStr) -> Result<Self> {
        let text = lit.value();
        match Self::ALL.iter().find(|(name, _)| *name == text) {
            Some((_, rule)) => Ok(*rule),
            None => {
                let names: Vec<&str> = Self::ALL.iter().map(|(name, _)| *name).collect();
                Err(Error::new(
                    lit.span(),
                    format!("unknown rename rule `{text}`, expected {}", one_of(&names)),
                ))
            }
        }
    }

    /// A variant's name (declared in PascalCase) under this rule.
    fn variant(self, variant: &str) -> String {
        match self {
            RenameRule::None | RenameRule::PascalCase => variant.to_owned(),
            RenameRule::LowerCase => variant.to_ascii_lowercase(),
            RenameRule::UpperCase => variant.to_ascii_uppercase(),
            RenameRule::CamelCase => {
                let mut chars = variant.chars();
                match chars.next() {
                    Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                    None => String::new(),
                }
            }
            RenameRule::SnakeCase => {
                let mut snake = String::new();
                for (i, ch) in variant.char_indices() {
                    if i > 0 && ch.is_uppercase() {
                        snake.push('_');
                    }
                    snake.push(ch.to_ascii_lowercase());
                }
                snake
            }
            RenameRule::ScreamingSnakeCase => {
                RenameRule::SnakeCase.variant(variant).to_ascii_uppercase()
            }
            RenameRule::KebabCase => RenameRule::SnakeCase.variant(variant).replace('_', "-"),
            RenameRule::ScreamingKebabCase => RenameRule::ScreamingSnakeCase
                .variant(variant)
                .replace('_', "-"),
        }
    }

    /// A field's name (declared in snake_case) under this rule.
    fn field(self, field: &str) -> String {
        match self {
            RenameRule::None | RenameRule::LowerCase | RenameRule::SnakeCase => field.to_owned(),
            RenameRule::UpperCase | RenameRule::ScreamingSnakeCase => field.to_ascii_uppercase(),
            RenameRule::PascalCase => {
                let mut pascal = String::new();
                let mut capitalize = true;
                for ch in field.chars() {
                    if ch == '_' {
                        capitalize = true;
                    } else if capitalize {
                        pascal.push(ch.to_ascii_uppercase());
                        capitalize = false;
                    } else {
                        pascal.push(ch);
                    }
                }
                pascal
            }
            RenameRule::CamelCase => {
                let pascal = RenameRule::PascalCase.field(field);
                let mut chars = pascal.chars();
                match chars.next() {
                    Some(first) => first.to_ascii_lowercase().to_string() + chars.as_str(),
                    None => String::new(),
                }
            }
            RenameRule::KebabCase => field.replace('_', "-"),
            RenameRule::ScreamingKebabCase => field.to_ascii_uppercase().replace('_', "-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_renamed_as_serde_renames_them() {
        let cases = [
            ("camelCase", "own_timing_429_at", "ownTiming429At"),
            ("camelCase", "rate_limited_per_1000", "rateLimitedPer1000"),
            ("PascalCase", "length_ms", "LengthMs"),
            ("kebab-case", "length_ms", "length-ms"),
            ("SCREAMING_SNAKE_CASE", "length_ms", "LENGTH_MS"),
            ("SCREAMING-KEBAB-CASE", "length_ms", "LENGTH-MS"),
            ("lowercase", "length_ms", "length_ms"),
        ];
        for (rule, field, expected) in cases {
            let rule =
                RenameRule::from_lit(&LitStr::new(rule, proc_macro2::Span::call_site())).unwrap();
            assert_eq!(rule.field(field), expected, "{rule:?} {field}");
        }
    }

    #[test]
    fn variants_are_renamed_as_serde_renames_them() {
        let cases = [
            ("kebab-case", "RetryWait", "retry-wait"),
            ("lowercase", "RetryWait", "retrywait"),
            ("camelCase", "EnqueuedMany", "enqueuedMany"),
            ("snake_case", "NoBudgetForUrl", "no_budget_for_url"),
            ("SCREAMING-KEBAB-CASE", "RetryWait", "RETRY-WAIT"),
        ];
        for (rule, variant, expected) in cases {
            let rule =
                RenameRule::from_lit(&LitStr::new(rule, proc_macro2::Span::call_site())).unwrap();
            assert_eq!(rule.variant(variant), expected, "{rule:?} {variant}");
        }
    }

    #[test]
    fn expected_names_are_worded_as_serde_words_them() {
        assert_eq!(one_of(&["a"]), "`a`");
        assert_eq!(one_of(&["a", "b"]), "`a` or `b`");
        assert_eq!(one_of(&["a", "b", "c"]), "one of `a`, `b`, `c`");
    }
}
