//! The impls of an internally tagged enum (`#[serde(tag = "...")]`): `ToJson` with
//! `TaggedWrite`, `FromJson` with `TaggedRead`, each variant an object beside the tag.

use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{DeriveInput, Ident};

use crate::attrs::Fallback;
use crate::codegen::placeholders;
use crate::shape::{Field, TaggedVariant};

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
pub(crate) fn tagged_writer(
    input: &DeriveInput,
    tag: &str,
    variants: &[TaggedVariant],
) -> TokenStream2 {
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let json = quote! { ::sluice_json };
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
                let field_writes = fields.iter().map(|f| {
                    let (key, field) = (&f.key, &f.ident);
                    match &f.skip_if {
                        Some(skip) => quote! {
                            if !#skip(#field) {
                                #json::write_field(out, #key, #field);
                            }
                        },
                        None => quote! { #json::write_field(out, #key, #field); },
                    }
                });
                quote! {
                    #name::#ident { #(#idents),* } => {
                        #(#field_writes)*
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
pub(crate) fn tagged_reader(
    input: &DeriveInput,
    tag: &str,
    variants: &[TaggedVariant],
) -> TokenStream2 {
    let name = &input.ident;
    let (impl_generics, type_generics, where_clause) = input.generics.split_for_impl();
    let json = quote! { ::sluice_json };
    let texts: Vec<&String> = variants.iter().map(|v| &v.name).collect();
    let expected = format!("internally tagged enum {name}");
    // `Shape::of` refuses an enum without variants.
    let first = &variants[0];
    let first_ident = &first.ident;
    let placeholder = match &first.fields {
        None => quote! { #name::#first_ident },
        Some(fields) => placeholders(&quote! { #name::#first_ident }, fields),
    };
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

            fn placeholder() -> Self {
                #placeholder
            }
        }
    }
}
