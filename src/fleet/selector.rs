//! Selectors: which nodes an operator means (PROTOCOL §16.2). One grammar everywhere
//! (`GET /v1/nodes?selector=`, `outpost nodes --selector`, the console's filter):
//! requirements separated by commas, all of which must hold.
//!
//! ```text
//! site=north          the label site is north         (== also accepted)
//! site!=north         site is not north, or absent
//! site                the node has the label site
//! !site               it has not
//! site in (a,b)       site is a or b
//! site notin (a,b)    site is neither, or absent
//! inventory.os=…      the same forms on a fact the node reports (inventory.<fact>)
//! ```
//!
//! Spaces around words and punctuation are allowed. A value is 0 to 63 characters, none
//! of `,` `(` `)` `=` `!` or a space. Pure: [`Selector::parse`] names the position of
//! the first thing wrong; [`Selector::matches`] takes the node's labels and a lookup of
//! its facts.

use super::labels::{is_key_char, Labels, MAX_KEY, MAX_VALUE};

/// The prefix that names an inventory fact instead of a label.
pub const INVENTORY: &str = "inventory.";

/// What a key names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Label(String),
    Fact(String),
}

/// One requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Eq(Key, String),
    Ne(Key, String),
    Has(Key),
    HasNot(Key),
    In(Key, Vec<String>),
    NotIn(Key, Vec<String>),
}

/// A parsed selector: every requirement must hold (the empty selector selects all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector(pub Vec<Requirement>);

/// A malformed selector: where (a 0-based character position) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("selector, at character {pos}: {what}")]
pub struct BadSelector {
    pub pos: usize,
    pub what: String,
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

fn is_value_char(b: u8) -> bool {
    b.is_ascii_graphic() && !matches!(b, b',' | b'(' | b')' | b'=' | b'!')
}

impl Parser<'_> {
    fn bad<T>(&self, what: impl Into<String>) -> Result<T, BadSelector> {
        Err(BadSelector {
            pos: self.at,
            what: what.into(),
        })
    }

    fn spaces(&mut self) {
        while self.s.get(self.at) == Some(&b' ') {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.at..].starts_with(lit.as_bytes()) {
            self.at += lit.len();
            true
        } else {
            false
        }
    }

    fn key(&mut self) -> Result<Key, BadSelector> {
        let start = self.at;
        while self.peek().is_some_and(is_key_char) {
            self.at += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default();
        if word.is_empty() {
            return self.bad("expected a label key (a-z, 0-9, '.', '_', '-', '/')");
        }
        let (key, len) = match word.strip_prefix(INVENTORY) {
            Some(fact) => (Key::Fact(fact.to_string()), fact.len()),
            None => (Key::Label(word.to_string()), word.len()),
        };
        if len == 0 || len > MAX_KEY {
            self.at = start;
            return self.bad(format!("{word:?}: a key is 1 to {MAX_KEY} characters"));
        }
        Ok(key)
    }

    fn value(&mut self) -> Result<String, BadSelector> {
        let start = self.at;
        while self.peek().is_some_and(is_value_char) {
            self.at += 1;
        }
        if self.at - start > MAX_VALUE {
            self.at = start;
            return self.bad(format!("a value is at most {MAX_VALUE} characters"));
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.at]).into_owned())
    }

    fn values(&mut self) -> Result<Vec<String>, BadSelector> {
        self.spaces();
        if !self.eat("(") {
            return self.bad("expected '(' and a list of values");
        }
        let mut out = Vec::new();
        loop {
            self.spaces();
            out.push(self.value()?);
            self.spaces();
            if self.eat(")") {
                return Ok(out);
            }
            if !self.eat(",") {
                return self.bad("expected ',' or ')' in the list of values");
            }
        }
    }

    /// After a key: a space-delimited word (`in`, `notin`), if the next word is one.
    fn word(&mut self, w: &str) -> bool {
        let save = self.at;
        self.spaces();
        if self.eat(w)
            && matches!(self.peek(), Some(b' ') | Some(b'('))
            && save != self.at - w.len()
        {
            return true;
        }
        self.at = save;
        false
    }

    fn requirement(&mut self) -> Result<Requirement, BadSelector> {
        self.spaces();
        if self.eat("!") {
            self.spaces();
            return Ok(Requirement::HasNot(self.key()?));
        }
        let key = self.key()?;
        if self.word("notin") {
            return Ok(Requirement::NotIn(key, self.values()?));
        }
        if self.word("in") {
            return Ok(Requirement::In(key, self.values()?));
        }
        self.spaces();
        if self.eat("!=") {
            self.spaces();
            return Ok(Requirement::Ne(key, self.value()?));
        }
        if self.eat("==") || self.eat("=") {
            self.spaces();
            return Ok(Requirement::Eq(key, self.value()?));
        }
        Ok(Requirement::Has(key))
    }
}

impl Selector {
    /// Parse `text` (empty or blank: everything).
    pub fn parse(text: &str) -> Result<Selector, BadSelector> {
        if let Some(i) = text.find(|c: char| !c.is_ascii() || c.is_ascii_control()) {
            return Err(BadSelector {
                pos: text[..i].chars().count(),
                what: "only printable ASCII characters".into(),
            });
        }
        let mut p = Parser {
            s: text.as_bytes(),
            at: 0,
        };
        let mut out = Vec::new();
        p.spaces();
        if p.peek().is_none() {
            return Ok(Selector(out));
        }
        loop {
            out.push(p.requirement()?);
            p.spaces();
            match p.peek() {
                None => return Ok(Selector(out)),
                Some(b',') => p.at += 1,
                Some(_) => return p.bad("expected ',' or the end"),
            }
        }
    }

    /// Does a node with `labels` and facts `fact` match?
    pub fn matches(&self, labels: &Labels, fact: &dyn Fn(&str) -> Option<String>) -> bool {
        self.0.iter().all(|r| {
            let get = |k: &Key| match k {
                Key::Label(l) => labels.get(l).map(str::to_string),
                Key::Fact(f) => fact(f),
            };
            match r {
                Requirement::Eq(k, v) => get(k).as_deref() == Some(v.as_str()),
                Requirement::Ne(k, v) => get(k).as_deref() != Some(v.as_str()),
                Requirement::Has(k) => get(k).is_some(),
                Requirement::HasNot(k) => get(k).is_none(),
                Requirement::In(k, vs) => get(k).is_some_and(|x| vs.contains(&x)),
                Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.contains(&x)),
            }
        })
    }

    /// Does the selector name any inventory fact?
    pub fn uses_inventory(&self) -> bool {
        self.0.iter().any(|r| {
            matches!(
                r,
                Requirement::Eq(Key::Fact(_), _)
                    | Requirement::Ne(Key::Fact(_), _)
                    | Requirement::Has(Key::Fact(_))
                    | Requirement::HasNot(Key::Fact(_))
                    | Requirement::In(Key::Fact(_), _)
                    | Requirement::NotIn(Key::Fact(_), _)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(pairs: &[(&str, &str)]) -> Labels {
        Labels::from_pairs(pairs.iter().copied()).unwrap()
    }

    fn sel(s: &str) -> Selector {
        Selector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn no_facts(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn every_form_parses_and_matches() {
        let north = node(&[("site", "north"), ("role", "pump")]);
        let south = node(&[("site", "south")]);
        let bare = node(&[]);
        let cases: &[(&str, [bool; 3])] = &[
            ("", [true, true, true]),
            ("site=north", [true, false, false]),
            ("site == north", [true, false, false]),
            ("site!=north", [false, true, true]),
            ("site", [true, true, false]),
            ("!site", [false, false, true]),
            ("! role", [false, true, true]),
            ("site in (north,south)", [true, true, false]),
            ("site in ( north , x )", [true, false, false]),
            ("site notin (north)", [false, true, true]),
            ("site=north,role=pump", [true, false, false]),
            (" site , !role ", [false, true, false]),
            ("site=", [false, false, false]),
            ("site!=", [true, true, true]),
        ];
        for (s, want) in cases {
            let got = [&north, &south, &bare].map(|l| sel(s).matches(l, &no_facts));
            assert_eq!(&got, want, "{s:?}");
        }
    }

    #[test]
    fn inventory_facts_are_selected_like_labels() {
        let s = sel("inventory.os=debian-12,inventory.arch in (aarch64,armv7l),site");
        assert!(s.uses_inventory());
        let l = node(&[("site", "x")]);
        let facts = |f: &str| match f {
            "os" => Some("debian-12".to_string()),
            "arch" => Some("aarch64".to_string()),
            _ => None,
        };
        assert!(s.matches(&l, &facts));
        assert!(!sel("inventory.arch=x86_64").matches(&l, &facts));
        assert!(sel("!inventory.serial").matches(&l, &facts));
        assert!(!sel("site=x").uses_inventory());
    }

    #[test]
    fn malformed_selectors_name_the_position() {
        let cases: &[(&str, usize)] = &[
            ("site=north,", 11),
            ("=north", 0),
            ("Site=north", 0),
            ("site in north", 8),
            ("site in (a,b", 12),
            ("site in (a b)", 11),
            ("site north", 5),
            ("site=a b", 7),
            ("inventory.=x", 0),
            ("site=é", 5),
            ("!", 1),
            ("a,,b", 2),
        ];
        for (s, pos) in cases {
            match Selector::parse(s) {
                Err(e) => assert_eq!(e.pos, *pos, "{s:?}: {e}"),
                Ok(x) => panic!("{s:?} parsed as {x:?}"),
            }
        }
        let long = format!("site={}", "v".repeat(64));
        assert_eq!(Selector::parse(&long).unwrap_err().pos, 5);
    }

    #[test]
    fn in_and_notin_are_words_not_prefixes() {
        // A key that starts with "in" is a key.
        assert_eq!(
            sel("index=1"),
            Selector(vec![Requirement::Eq(
                Key::Label("index".into()),
                "1".into()
            )])
        );
        assert_eq!(
            sel("site in(a)"),
            Selector(vec![Requirement::In(
                Key::Label("site".into()),
                vec!["a".into()]
            )])
        );
    }

    proptest! {
        /// Any text: a selector or a position inside (or just past) the text, never a
        /// panic.
        #[test]
        fn arbitrary_text_parses_or_names_a_position(s in "[ -~]{0,40}") {
            if let Err(e) = Selector::parse(&s) {
                prop_assert!(e.pos <= s.len());
            }
        }

        /// `k notin (v)` is exactly "not `k in (v)`", and `k!=v` "not `k=v`".
        #[test]
        fn negations_are_complements(v in "[a-z]{1,3}", have in proptest::option::of("[a-z]{1,3}")) {
            let l = match &have {
                Some(x) => node(&[("k", x.as_str())]),
                None => node(&[]),
            };
            let m = |s: String| sel(&s).matches(&l, &no_facts);
            prop_assert_eq!(m(format!("k notin ({v})")), !m(format!("k in ({v})")));
            prop_assert_eq!(m(format!("k!={v}")), !m(format!("k={v}")));
            prop_assert_eq!(m("!k".into()), !m("k".into()));
        }
    }
}
