//! How a person reads a seat name (rule 17: "a row whose seat name reads as
//! a template seat protects that seat"). MySQL's collation already takes
//! `a-1` and `A-1 ` for `A-1`; a person also reads `A-1` in `Ａ-１`
//! (fullwidth), `A‑1` spelled with a no-break space or a zero-width
//! character inside, and `É-1` whether its accent is a character of its
//! own (`E` + U+0301) or not. [`read_as`] gives one spelling for all of
//! them: Unicode NFKC (compatibility forms folded, accents composed), full
//! case folding, then no White_Space and no Default_Ignorable_Code_Point
//! (zero-width characters, joiners, variation selectors, soft hyphens).
//! A row whose seat name is no template seat's, byte for byte, but reads as
//! one, may hold that seat for the customer who reads it: raises only,
//! never a lowering, never a free rebuild.
//!
//! Pure. Only names that are not a template seat byte for byte are read so
//! (rare): the sweep's hot path never normalises.

use std::borrow::Cow;
use std::collections::HashMap;

use icu_casemap::CaseMapperBorrowed;
use icu_normalizer::ComposingNormalizerBorrowed;
use icu_properties::CodePointSetData;
use icu_properties::props::{DefaultIgnorableCodePoint, WhiteSpace};

use super::SeatNo;

/// `name` as a person reads it: NFKC, case folded, NFKC again (folding may
/// undo a composition), without White_Space or Default_Ignorable_Code_Point.
pub fn read_as(name: &str) -> String {
    // Plain ASCII, the usual seat name: NFKC leaves it be, folding is
    // lower-casing, and only its white space goes.
    if name.is_ascii() {
        return name
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .map(|c| c.to_ascii_lowercase())
            .collect();
    }
    let nfkc = ComposingNormalizerBorrowed::new_nfkc();
    let folded = CaseMapperBorrowed::new()
        .fold_string(&nfkc.normalize(name))
        .into_owned();
    let again: Cow<'_, str> = nfkc.normalize(&folded);
    let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    let space = CodePointSetData::new::<WhiteSpace>();
    again
        .chars()
        .filter(|c| !ignorable.contains(*c) && !space.contains(*c))
        .collect()
}

/// A template's seats by how they read, built when a row names no seat of
/// it byte for byte.
#[derive(Debug, Clone, Default)]
pub struct ReadNames(HashMap<String, Vec<SeatNo>>);

impl ReadNames {
    pub fn of(seats: &[SeatNo]) -> ReadNames {
        let mut map: HashMap<String, Vec<SeatNo>> = HashMap::with_capacity(seats.len());
        for seat in seats {
            map.entry(read_as(seat)).or_default().push(seat.clone());
        }
        ReadNames(map)
    }

    /// The template seats `name` reads as (none, one, or several that read
    /// alike themselves). A name that reads as nothing (only invisible
    /// characters) names no seat.
    pub fn seats_read_as(&self, name: &str) -> &[SeatNo] {
        let read = read_as(name);
        if read.is_empty() {
            return &[];
        }
        self.0.get(&read).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_alike_spellings_read_as_the_same_seat() {
        let same = [
            ("É-1", "E\u{301}-1"),     // composed and decomposed
            ("A-1", "Ａ-１"),          // fullwidth
            ("A-1", "Ａ－１"),         // fullwidth hyphen too
            ("A-1", "A\u{a0}-1"),      // no-break space
            ("A-1", "A\u{202f}-1"),    // narrow no-break space
            ("A-1", "A\u{200b}-1"),    // zero-width space
            ("A-1", "\u{feff}A-1"),    // byte order mark
            ("A-1", "A\u{ad}-1"),      // soft hyphen
            ("A-1", "A-1\u{fe0f}"),    // variation selector
            ("A-1", "a-1"),            // case
            ("A-1", "A- 1"),           // a space inside
            ("STRASSE-1", "straße-1"), // full case folding
            ("Ⅻ-1", "xii-1"),          // roman numeral (compatibility)
            ("ﬁ-1", "FI-1"),           // ligature
        ];
        for (a, b) in same {
            assert_eq!(read_as(a), read_as(b), "{a:?} {b:?}");
        }
        for (a, b) in [
            ("A-1", "A-2"),
            ("A-1", "A-11"),
            ("É-1", "E-1"),
            ("A-1", "Α-1"),
        ] {
            assert_ne!(read_as(a), read_as(b), "{a:?} {b:?}");
        }
    }

    #[test]
    fn a_template_answers_which_seats_a_name_reads_as() {
        let seats: Vec<SeatNo> = ["A-1", "A-2", "É-3"].map(String::from).to_vec();
        let names = ReadNames::of(&seats);
        assert_eq!(names.seats_read_as("Ａ-２"), ["A-2"]);
        assert_eq!(names.seats_read_as("e\u{301}-3"), ["É-3"]);
        assert!(names.seats_read_as("Z-9").is_empty());
        assert!(names.seats_read_as("\u{200b}").is_empty());
    }
}
