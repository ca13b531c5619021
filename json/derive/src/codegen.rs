//! The `ToJson` and `FromJson` impls written from a [`Shape`]: structs and enums of unit
//! variants here; a tagged enum's are handed to `tagged.rs`.

use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::DeriveInput;

use crate::attrs::Fallback;
use crate::names::one_of;
use crate::shape::{Field, Shape};
use crate::tagged::{tagged_reader, tagged_writer};

impl Shape {
    /// The `ToJson` impl.
    pub(crate) fn writer(&self, input: &DeriveInput) -> TokenStream2 {
        let name = &input.ident;
        let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
        let body = match self {
            Shape::Struct { fields, .. } if fields.is_empty() => quote! { out.push_str("{}"); },
            Shape::Struct { fields, .. } if fields.iter().any(|f| f.skip_if.is_some()) => {
                // Which field comes first is known only as they are written.
                let writes = fields.iter().map(|field| {
                    let first = format!("{{\"{}\":", field.key);
                    let next = format!(",\"{}\":", field.key);
                    let ident = &field.ident;
                    let write = quote! {
                        out.push_str(if written { #next } else { #first });
                        written = true;
                        ::sluice_json::ToJson::write_json(&self.#ident, out);
                    };
                    match &field.skip_if {
                        Some(skip) => quote! { if !#skip(&self.#ident) { #write } },
                        None => write,
                    }
                });
                quote! {
                    let mut written = false;
                    #(#writes)*
                    if !written {
                        out.push('{');
                    }
                    out.push('}');
                }
            }
            Shape::Struct { fields, .. } => {
                // `{"first":` then `,"next":` for each further field: one `push_str` of a
                // constant per field, as serde_json writes them.
                let writes = fields.iter().enumerate().map(|(i, field)| {
                    let opening = if i == 0 { "{\"" } else { ",\"" };
                    let prefix = format!("{opening}{}\":", field.key);
                    let ident = &field.ident;
                    quote! {
                        out.push_str(#prefix);
                        ::sluice_json::ToJson::write_json(&self.#ident, out);
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
            impl #impl_generics ::sluice_json::ToJson for #name #type_generics #where_clause {
                fn write_json(&self, out: &mut ::std::string::String) {
                    #body
                }
            }
        }
    }

    /// The `FromJson` impl (and for a struct `StructFields`).
    pub(crate) fn reader(&self, input: &DeriveInput) -> TokenStream2 {
        let name = &input.ident;
        let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
        let json = quote! { ::sluice_json };
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
                let idents: Vec<_> = fields.iter().map(|field| &field.ident).collect();
                // A struct that has a `Default` for serde's `default` takes it.
                let placeholder = if *default {
                    quote! { <Self as ::core::default::Default>::default() }
                } else {
                    placeholders(&quote! { Self }, fields)
                };
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

                        fn placeholder() -> Self {
                            #placeholder
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
                // `Shape::of` refuses an enum without variants.
                let first = &variants[0].ident;
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

                        fn placeholder() -> Self {
                            #name::#first
                        }
                    }
                }
            }
        }
    }
}

/// `path { field: placeholder, .. }`: a value of `fields` that is never seen, for
/// `FromJson::placeholder`.
pub(crate) fn placeholders(path: &TokenStream2, fields: &[Field]) -> TokenStream2 {
    let idents = fields.iter().map(|field| &field.ident);
    quote! {
        #path { #(#idents: ::sluice_json::FromJson::placeholder(),)* }
    }
}
