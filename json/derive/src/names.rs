//! Names in JSON: serde's `rename_all` rules, the check that a name needs no escaping, and
//! serde's words for the names it expected.

use syn::{Error, LitStr, Result};

/// Names are pasted into the output between quotes as they are: one that JSON would escape
/// would be written wrong, so it is refused (none needs one).
pub(crate) fn check_name(name: &str, span: proc_macro2::Span) -> Result<()> {
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
pub(crate) fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    match quoted.as_slice() {
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        more => format!("one of {}", more.join(", ")),
    }
}

/// serde's `rename_all` rules, as serde_derive applies them (its `case.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum RenameRule {
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

    pub(crate) fn from_lit(lit: &LitStr) -> Result<Self> {
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
    pub(crate) fn variant(self, variant: &str) -> String {
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
    pub(crate) fn field(self, field: &str) -> String {
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
