//! The one table of what each read accepts (rule 17): for every way the
//! reconciler reads a column ([`Read`]), the MySQL types it reads
//! losslessly. The judge asks it of a column as `information_schema`
//! describes it ([`accepts`]); the store's decoders ask it of a value as
//! the wire types it ([`decodes`]). A type in the table is read; a type
//! outside it is a deviation that holds what the column touches, never a
//! decode failure at run time.

use super::ColumnFacts;

/// How the reconciler reads a column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// An id or a number, as BIGINT: any integer width, signed or not (a
    /// value beyond BIGINT is its row's problem), and `DECIMAL(n,0)` with
    /// n ≤ 18 (every value fits).
    Integer,
    /// A flag the contract compares with 0 and 1 (`TINYINT(1)`, `BOOLEAN`):
    /// read as an integer, so any integer type.
    Flag,
    /// A date-time in UTC: `DATETIME` or `TIMESTAMP` of any precision (the
    /// session's time zone is pinned to UTC, so a `TIMESTAMP` reads as
    /// stored).
    DateTime,
    /// Text compared byte for byte with the contract's spellings: a
    /// character string, or an `ENUM` whose members include every one of
    /// `values` (what the contract reads and what the reconciler writes).
    Spelled(&'static [&'static str]),
    /// A name read as text (a seat number, a label): a character string in
    /// any character set (MySQL sends it as utf8mb4), or an `ENUM`.
    Name,
    /// Never read: any type.
    Unread,
}

/// A MySQL type family, as the reads tell types apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Integer,
    Decimal,
    DateTime,
    /// `CHAR`, `VARCHAR` and the `TEXT`s: characters in a character set.
    Text,
    Enum,
    /// `BINARY`, `VARBINARY` and the `BLOB`s: bytes that need not be text.
    Binary,
    /// Anything else: `DATE`, `TIME`, `YEAR`, `BIT`, `SET`, `FLOAT`,
    /// `DOUBLE`, `JSON`, spatial types.
    Other,
}

impl Family {
    /// The family of an `information_schema.COLUMNS.DATA_TYPE` (lower case).
    pub fn of_data_type(data_type: &str) -> Family {
        match data_type {
            "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => Family::Integer,
            "decimal" | "numeric" => Family::Decimal,
            "datetime" | "timestamp" => Family::DateTime,
            "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => Family::Text,
            "enum" => Family::Enum,
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                Family::Binary
            }
            _ => Family::Other,
        }
    }

    /// The family of a value as the wire types it (the driver's type name,
    /// upper case: `BIGINT UNSIGNED`, `TIMESTAMP`, `VARCHAR`). The wire
    /// marks a binary collation (`utf8mb4_bin`) as it marks a binary
    /// string, so every string type is [`Family::Text`] here: the judge
    /// tells them apart by `DATA_TYPE`, and the text decoder refuses bytes
    /// that are not UTF-8 (what a utf8mb4 session sends for every
    /// character set).
    pub fn of_wire(name: &str) -> Family {
        let base = name.strip_suffix(" UNSIGNED").unwrap_or(name);
        match base {
            "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" | "BOOLEAN" => Family::Integer,
            "DECIMAL" => Family::Decimal,
            "DATETIME" | "TIMESTAMP" => Family::DateTime,
            "CHAR" | "VARCHAR" | "TINYTEXT" | "TEXT" | "MEDIUMTEXT" | "LONGTEXT" | "BINARY"
            | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB" => Family::Text,
            "ENUM" => Family::Enum,
            _ => Family::Other,
        }
    }
}

/// The families each read takes: the table the judge and the decoders
/// share. (The judge asks more of some: a `DECIMAL` must have scale 0 and
/// at most 18 digits, an `ENUM` the contract's values, a string no binary
/// type; see [`accepts`].)
pub const READS: [(Read, &[Family]); 5] = [
    (Read::Integer, &[Family::Integer, Family::Decimal]),
    (Read::Flag, &[Family::Integer, Family::Decimal]),
    (Read::DateTime, &[Family::DateTime]),
    (Read::Name, &[Family::Text, Family::Enum]),
    // `Read::Spelled` and `Read::Unread` are matched below: their lists
    // depend on the values, or are every family.
    (Read::Unread, &[]),
];

fn families(read: Read) -> &'static [Family] {
    match read {
        Read::Spelled(_) => &[Family::Text, Family::Enum],
        _ => READS
            .iter()
            .find(|(r, _)| *r == read)
            .map_or(&[], |(_, f)| *f),
    }
}

/// Whether a value the wire types so is read by `read` (the decoders ask;
/// a value of another family is an error naming the column and its type).
pub fn decodes(read: Read, wire_name: &str) -> bool {
    read == Read::Unread || families(read).contains(&Family::of_wire(wire_name))
}

/// Whether the reads take a column as MySQL describes it; `Err` says why
/// not, in words for the operator.
pub fn accepts(read: Read, c: &ColumnFacts) -> Result<(), String> {
    if read == Read::Unread {
        return Ok(());
    }
    let family = Family::of_data_type(&c.data_type);
    if !families(read).contains(&family) {
        return Err(match (read, family) {
            (_, Family::Binary) => format!(
                "{} is a binary string: bytes, not text in a character set, so a value need not read as text",
                c.column_type
            ),
            (Read::DateTime, _) => format!(
                "{} is not a date and time of day (DATETIME or TIMESTAMP)",
                c.column_type
            ),
            (Read::Integer | Read::Flag, _) => {
                format!("{} is not an integer type", c.column_type)
            }
            _ => format!("{} is not a character string", c.column_type),
        });
    }
    match (read, family) {
        (Read::Integer | Read::Flag, Family::Decimal) => match decimal_digits(&c.column_type) {
            Some((digits, 0)) if digits <= 18 => Ok(()),
            _ => Err(format!(
                "{} may hold a value that is no integer within BIGINT (only DECIMAL(n,0) with n up to 18 always is)",
                c.column_type
            )),
        },
        (Read::Spelled(values), Family::Enum) => {
            let members = enum_members(&c.column_type);
            let missing: Vec<&str> = values
                .iter()
                .filter(|v| !members.iter().any(|m| m == *v))
                .copied()
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "{} has no member {}",
                    c.column_type,
                    missing.join(", ")
                ))
            }
        }
        _ => Ok(()),
    }
}

/// `decimal(18,0)` → (18, 0).
fn decimal_digits(column_type: &str) -> Option<(u32, u32)> {
    let inner = column_type
        .split_once('(')?
        .1
        .split_once(')')?
        .0
        .replace(' ', "");
    let (m, d) = inner.split_once(',').unwrap_or((&inner, "0"));
    Some((m.parse().ok()?, d.parse().ok()?))
}

/// `enum('PAID','it''s')` → `["PAID", "it's"]`, as `COLUMN_TYPE` quotes them.
pub fn enum_members(column_type: &str) -> Vec<String> {
    let Some(list) = column_type
        .find('(')
        .and_then(|at| column_type.get(at + 1..column_type.len().saturating_sub(1)))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut member = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\'' if chars.peek() == Some(&'\'') => {
                    chars.next();
                    member.push('\'');
                }
                '\'' => break,
                '\\' => member.extend(chars.next()),
                c => member.push(c),
            }
        }
        out.push(member);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(data_type: &str, column_type: &str) -> ColumnFacts {
        ColumnFacts {
            table: "t".into(),
            column: "c".into(),
            data_type: data_type.into(),
            column_type: column_type.into(),
            nullable: false,
            max_chars: None,
            charset: None,
            collation: None,
        }
    }

    #[test]
    fn each_read_takes_its_families_and_refuses_the_rest() {
        let ok = |read, d, t| accepts(read, &facts(d, t)).is_ok();
        for (d, t) in [
            ("tinyint", "tinyint(4)"),
            ("smallint", "smallint(5) unsigned"),
            ("mediumint", "mediumint(9)"),
            ("int", "int(11)"),
            ("bigint", "bigint(20) unsigned"),
            ("decimal", "decimal(18,0)"),
            ("decimal", "decimal(10,0) unsigned"),
        ] {
            assert!(ok(Read::Integer, d, t), "{t}");
            assert!(ok(Read::Flag, d, t), "{t}");
        }
        for (d, t) in [
            ("decimal", "decimal(19,0)"),
            ("decimal", "decimal(10,2)"),
            ("bit", "bit(1)"),
            ("float", "float"),
            ("varchar", "varchar(20)"),
            ("date", "date"),
            ("json", "longtext"),
        ] {
            assert!(!ok(Read::Integer, d, t), "{t}");
        }
        for t in [
            "datetime",
            "datetime(3)",
            "datetime(6)",
            "timestamp",
            "timestamp(3)",
        ] {
            assert!(
                ok(Read::DateTime, &t[..t.find('(').unwrap_or(t.len())], t),
                "{t}"
            );
        }
        for (d, t) in [
            ("date", "date"),
            ("time", "time(3)"),
            ("year", "year(4)"),
            ("varchar", "varchar(30)"),
        ] {
            assert!(!ok(Read::DateTime, d, t), "{t}");
        }
        for (d, t) in [
            ("char", "char(16)"),
            ("varchar", "varchar(16)"),
            ("text", "text"),
            ("mediumtext", "mediumtext"),
            ("enum", "enum('A-1','A-2')"),
        ] {
            assert!(ok(Read::Name, d, t), "{t}");
        }
        for (d, t) in [
            ("varbinary", "varbinary(16)"),
            ("binary", "binary(16)"),
            ("blob", "blob"),
            ("set", "set('a')"),
            ("int", "int(11)"),
        ] {
            assert!(!ok(Read::Name, d, t), "{t}");
        }
        let statuses = Read::Spelled(&["PENDING", "PAID", "CANCELLED", "REFUNDED"]);
        assert!(ok(
            statuses,
            "enum",
            "enum('PENDING','PAID','CANCELLED','REFUNDED','X')"
        ));
        let refused = accepts(
            statuses,
            &facts("enum", "enum('PENDING','PAID','REFUNDED')"),
        );
        assert_eq!(
            refused,
            Err("enum('PENDING','PAID','REFUNDED') has no member CANCELLED".into())
        );
        assert!(ok(Read::Unread, "json", "longtext"));
    }

    /// The decoders' side of the same table, by the wire's type names.
    #[test]
    fn the_decoders_take_the_same_families_by_their_wire_names() {
        for name in ["BIGINT", "BIGINT UNSIGNED", "INT", "BOOLEAN", "DECIMAL"] {
            assert!(decodes(Read::Integer, name), "{name}");
        }
        for name in ["DATETIME", "TIMESTAMP"] {
            assert!(decodes(Read::DateTime, name), "{name}");
            assert!(!decodes(Read::Integer, name), "{name}");
        }
        for name in [
            "DATE", "TIME", "YEAR", "BIT", "SET", "JSON", "FLOAT", "DOUBLE",
        ] {
            assert!(!decodes(Read::DateTime, name), "{name}");
            assert!(!decodes(Read::Integer, name), "{name}");
            assert!(!decodes(Read::Name, name), "{name}");
        }
        for name in ["VARCHAR", "CHAR", "TEXT", "ENUM", "VARBINARY"] {
            assert!(decodes(Read::Name, name), "{name}");
        }
    }

    #[test]
    fn enum_members_are_read_as_column_type_quotes_them() {
        assert_eq!(
            enum_members("enum('PAID','it''s','a,b')"),
            ["PAID", "it's", "a,b"]
        );
        assert!(enum_members("varchar(3)").is_empty());
        assert_eq!(decimal_digits("decimal(18,0) unsigned"), Some((18, 0)));
        assert_eq!(decimal_digits("decimal(10,2)"), Some((10, 2)));
    }
}
