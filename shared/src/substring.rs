//! Finding and replacing text within text, byte by byte.
//!
//! `str::find`, `contains` and `replace` with a `&str` pattern bring core's two-way searcher
//! into the wasm (about 2.3 KB before gzip, see ARCHITECTURE.md, "Size: one policy"); the
//! needles here are a few bytes long and the texts short (URLs, header values, a job's body),
//! so a plain scan does as well. Patterns of one `char` (`find('/')`) do not need these.

/// Where `needle` first occurs in `haystack`. An empty needle is found at 0.
pub fn find(haystack: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &str, needle: &str) -> bool {
    find(haystack, needle).is_some()
}

/// `haystack` with every occurrence of `from` (not empty) replaced by `to`, as `str::replace`.
pub fn replace(haystack: &str, from: &str, to: &str) -> String {
    if from.is_empty() {
        return haystack.to_string();
    }
    let mut out = String::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(at) = find(rest, from) {
        out.push_str(&rest[..at]);
        out.push_str(to);
        rest = &rest[at + from.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn finds_and_replaces_as_str_does(
            haystack in "[ab{}:/é]{0,40}",
            needle in "[ab{}:/é]{1,4}",
            to in "[xy]{0,3}",
        ) {
            prop_assert_eq!(find(&haystack, &needle), haystack.find(needle.as_str()));
            prop_assert_eq!(contains(&haystack, &needle), haystack.contains(needle.as_str()));
            prop_assert_eq!(replace(&haystack, &needle, &to), haystack.replace(needle.as_str(), &to));
        }
    }
}
