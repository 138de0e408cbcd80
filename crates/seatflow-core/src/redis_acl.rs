//! The Redis ACL the reconciler's user needs (rule 18): every command it
//! sends, directly or from its scripts, every key pattern and every channel
//! pattern. One list makes both the rule an operator pastes (`ACL SETUSER`)
//! and the start's check, which asks `redis.acl_check_cmd` about each use
//! and writes nothing.

use crate::keys::{Channels, glob_escape};

/// Where and how the reconciler uses Redis: what its ACL depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisAccess {
    pub key_prefix: String,
    /// The database of a single server (a cluster has only 0).
    pub db: i64,
    pub cluster: bool,
    /// The daemon subscribes to keyspace events (`changes.redis_events =
    /// "auto"`) and writes its probe hash to learn whether they come.
    pub events: bool,
}

/// One use of Redis: a command with arguments as the check asks about it,
/// and the rule's tokens that allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub argv: Vec<String>,
    pub tokens: Vec<String>,
}

impl Use {
    /// `HSET seatflow:seat:{0} …`: the command and its first argument.
    pub fn describe(&self) -> String {
        let mut words = self.argv.iter();
        let command = words.next().map_or(String::new(), |c| c.to_uppercase());
        match words.next() {
            Some(first) if self.argv.len() > 2 => format!("{command} {first} …"),
            Some(first) => format!("{command} {first}"),
            None => command,
        }
    }
}

/// Commands with a key, each with arguments of the right arity: the
/// scripts' and the direct ones. The seat hashes and our own keys are both
/// asked about: the rule grants them together.
const KEYED: [(&str, &[&str]); 16] = [
    ("get", &[]),
    ("set", &["v"]),
    ("del", &[]),
    ("type", &[]),
    ("exists", &[]),
    ("pttl", &[]),
    ("pexpire", &["1000"]),
    ("hget", &["f"]),
    ("hgetall", &[]),
    ("hset", &["f", "v"]),
    ("hdel", &["f"]),
    ("rename", &["@"]),
    ("rpush", &["v"]),
    ("lrange", &["0", "-1"]),
    ("lindex", &["0"]),
    ("lpop", &[]),
];

/// A SHA1 of the right shape for `EVALSHA` (the check runs nothing).
const SOME_SHA: &str = "0000000000000000000000000000000000000000";

impl RedisAccess {
    /// The key patterns: seatflow's seat hashes and the reconciler's own keys.
    pub fn key_patterns(&self) -> [String; 2] {
        let prefix = glob_escape(&self.key_prefix);
        [format!("{prefix}seat:*"), format!("{prefix}reconcile:*")]
    }

    fn keyspace(&self) -> String {
        format!("__keyspace@{}__:", self.db)
    }

    /// The channel patterns, when events are subscribed: the subscriber's
    /// two patterns word for word (an ACL allows a `PSUBSCRIBE` pattern only
    /// when it is one of its own, literally) and the probe hashes' channels.
    pub fn channel_patterns(&self) -> Vec<String> {
        if !self.events {
            return Vec::new();
        }
        let mut patterns = self.channels().patterns().to_vec();
        patterns.push(format!("{}*", glob_escape(&self.probe_channel_prefix())));
        patterns
    }

    fn channels(&self) -> Channels {
        Channels::new(self.db, &self.key_prefix, Vec::new())
    }

    /// Every probe hash's channel begins so (one per instance, one per
    /// primary in a cluster: `Keys::events_probe`).
    fn probe_channel_prefix(&self) -> String {
        format!(
            "{}{}reconcile:events-probe:",
            self.keyspace(),
            self.key_prefix
        )
    }

    /// The commands, in ACL notation (`script|load`).
    pub fn commands(&self) -> Vec<&'static str> {
        let mut commands = vec!["ping", "time", "client|setname", "script|load", "evalsha"];
        if !self.cluster && self.db != 0 {
            commands.push("select");
        }
        if self.cluster {
            commands.extend(["cluster|slots", "asking"]);
        }
        commands.extend(KEYED.iter().map(|(c, _)| *c));
        if self.events {
            commands.extend(["multi", "exec", "psubscribe", "subscribe"]);
        }
        commands
    }

    /// The rule's tokens after the user's name: `resetkeys resetchannels
    /// -@all`, then each command, key pattern and channel pattern. Run on an
    /// existing user it leaves its password and its on/off state alone.
    pub fn tokens(&self) -> Vec<String> {
        let mut tokens: Vec<String> = ["resetkeys", "resetchannels", "-@all"]
            .map(String::from)
            .to_vec();
        tokens.extend(self.commands().iter().map(|c| format!("+{c}")));
        tokens.extend(self.key_patterns().iter().map(|p| format!("~{p}")));
        tokens.extend(self.channel_patterns().iter().map(|p| format!("&{p}")));
        tokens
    }

    /// `ACL SETUSER <user> <tokens>`, quoted for `redis-cli`.
    pub fn setuser(&self, user: &str) -> String {
        let mut line = format!("ACL SETUSER {}", cli_quote(user));
        for t in self.tokens() {
            line.push(' ');
            line.push_str(&cli_quote(&t));
        }
        line
    }

    /// Every use the check asks about, each with the tokens it needs.
    pub fn uses(&self) -> Vec<Use> {
        let plain = |argv: &[&str]| Use {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            tokens: vec![format!("+{}", acl_name(argv))],
        };
        let mut uses = vec![
            plain(&["ping"]),
            plain(&["time"]),
            plain(&["client", "setname", "seatflow-reconciler"]),
            plain(&["script", "load", "return 1"]),
            plain(&["evalsha", SOME_SHA, "0"]),
        ];
        if !self.cluster && self.db != 0 {
            uses.push(plain(&["select", &self.db.to_string()]));
        }
        if self.cluster {
            uses.extend([plain(&["cluster", "slots"]), plain(&["asking"])]);
        }
        let samples = [
            format!("{}seat:{{0}}", self.key_prefix),
            format!("{}reconcile:cursor:access-check", self.key_prefix),
        ];
        for (key, pattern) in samples.iter().zip(self.key_patterns()) {
            for (command, rest) in KEYED {
                let mut argv = vec![command.to_string(), key.clone()];
                argv.extend(rest.iter().map(|a| match *a {
                    "@" => key.clone(),
                    a => a.to_string(),
                }));
                uses.push(Use {
                    argv,
                    tokens: vec![format!("+{command}"), format!("~{pattern}")],
                });
            }
        }
        if self.events {
            uses.extend([plain(&["multi"]), plain(&["exec"])]);
            let channels = self.channels();
            for pattern in channels.patterns() {
                uses.push(Use {
                    argv: vec!["psubscribe".into(), pattern.clone()],
                    tokens: vec!["+psubscribe".into(), format!("&{pattern}")],
                });
            }
            uses.push(Use {
                argv: vec![
                    "subscribe".into(),
                    format!("{}access-check", self.probe_channel_prefix()),
                ],
                tokens: vec![
                    "+subscribe".into(),
                    format!("&{}*", glob_escape(&self.probe_channel_prefix())),
                ],
            });
        }
        uses
    }
}

/// What the rule lacks, from the uses the server refused (`refused`, their
/// indexes in `uses`): each token of a refused use that no allowed use
/// shows present, in the rule's order. A refused use whose every token is
/// shown present (a rule with selectors) is named as a whole.
pub fn missing_tokens(uses: &[Use], refused: &[usize]) -> Vec<String> {
    let present: Vec<&String> = uses
        .iter()
        .enumerate()
        .filter(|(i, _)| !refused.contains(i))
        .flat_map(|(_, u)| &u.tokens)
        .collect();
    let mut missing: Vec<String> = Vec::new();
    for u in refused.iter().filter_map(|i| uses.get(*i)) {
        let lacking: Vec<&String> = u.tokens.iter().filter(|t| !present.contains(t)).collect();
        if lacking.is_empty() {
            missing.push(format!("{} as a whole", u.describe()));
        }
        for t in lacking {
            if !missing.contains(t) {
                missing.push(t.clone());
            }
        }
    }
    missing
}

/// A command's ACL name: `script|load` for a command with subcommands.
fn acl_name(argv: &[&str]) -> String {
    match argv {
        [c @ ("script" | "client" | "cluster"), sub, ..] => format!("{c}|{sub}"),
        [c, ..] => c.to_string(),
        [] => String::new(),
    }
}

/// A word as `redis-cli` reads it: double-quoted when it holds a space, a
/// quote or a backslash, or is empty.
fn cli_quote(word: &str) -> String {
    if !word.is_empty()
        && !word
            .chars()
            .any(|c| c.is_whitespace() || "\"'\\".contains(c))
    {
        return word.to_string();
    }
    let mut out = String::from("\"");
    for c in word.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(events: bool) -> RedisAccess {
        RedisAccess {
            key_prefix: "seatflow:".into(),
            db: 0,
            cluster: false,
            events,
        }
    }

    #[test]
    fn the_default_rule_names_each_command_key_and_channel_pattern() {
        assert_eq!(
            access(true).setuser("reconciler"),
            "ACL SETUSER reconciler resetkeys resetchannels -@all +ping +time +client|setname \
             +script|load +evalsha +get +set +del +type +exists +pttl +pexpire +hget +hgetall \
             +hset +hdel +rename +rpush +lrange +lindex +lpop +multi +exec +psubscribe \
             +subscribe ~seatflow:seat:* ~seatflow:reconcile:* \
             &__keyspace@0__:seatflow:seat:{*} &__keyspace@0__:seatflow:reconcile:writing:{*} \
             &__keyspace@0__:seatflow:reconcile:events-probe:*"
        );
    }

    #[test]
    fn without_events_there_is_no_channel_and_no_probe_write() {
        let tokens = access(false).tokens();
        assert!(!tokens.iter().any(|t| t.starts_with('&')));
        for absent in ["+psubscribe", "+subscribe", "+multi", "+exec"] {
            assert!(!tokens.iter().any(|t| t == absent), "{absent}");
        }
    }

    #[test]
    fn a_cluster_reads_its_slots_and_a_database_is_selected() {
        let cluster = RedisAccess {
            cluster: true,
            ..access(true)
        };
        let tokens = cluster.tokens();
        assert!(tokens.contains(&"+cluster|slots".to_string()));
        assert!(tokens.contains(&"+asking".to_string()));
        assert!(!tokens.contains(&"+select".to_string()));
        let db3 = RedisAccess {
            db: 3,
            ..access(true)
        };
        assert!(db3.tokens().contains(&"+select".to_string()));
        assert!(
            db3.tokens()
                .contains(&"&__keyspace@3__:seatflow:seat:{*}".to_string())
        );
    }

    /// The channel tokens are the subscriber's own patterns: an ACL allows
    /// a `PSUBSCRIBE` only of a pattern it lists literally.
    #[test]
    fn channel_patterns_are_the_subscribers_word_for_word() {
        let a = RedisAccess {
            key_prefix: "odd*[x] ".into(),
            ..access(true)
        };
        let subscribed = Channels::new(0, "odd*[x] ", Vec::new()).patterns();
        for p in subscribed {
            assert!(a.channel_patterns().contains(&p), "{p}");
        }
        assert!(a.setuser("u").contains("\"~odd\\\\*\\\\[x\\\\] seat:*\""));
    }

    #[test]
    fn every_use_is_allowed_by_the_rule_and_needs_only_its_tokens() {
        for a in [access(true), access(false)] {
            let tokens = a.tokens();
            for u in a.uses() {
                for t in &u.tokens {
                    assert!(tokens.contains(t), "{t} of {:?}", u.argv);
                }
            }
            let used: Vec<String> = a.uses().iter().map(|u| u.tokens[0].clone()).collect();
            for c in a.commands() {
                assert!(used.contains(&format!("+{c}")), "{c} is never checked");
            }
        }
    }

    #[test]
    fn a_use_is_described_by_its_command_and_first_argument() {
        let uses = access(true).uses();
        let hset = uses.iter().find(|u| u.argv[0] == "hset").unwrap();
        assert_eq!(hset.describe(), "HSET seatflow:seat:{0} …");
        assert_eq!(uses[0].describe(), "PING");
    }

    #[test]
    fn what_is_missing_is_what_no_allowed_use_shows_present() {
        let uses = access(false).uses();
        let index = |argv0: &str, key: &str| {
            uses.iter()
                .position(|u| u.argv[0] == argv0 && u.argv.get(1).is_some_and(|k| k.contains(key)))
                .unwrap()
        };
        // `+hset` missing: both families' HSET are refused.
        let refused = [index("hset", "seat:"), index("hset", "reconcile:")];
        assert_eq!(missing_tokens(&uses, &refused), ["+hset"]);
        // Our own keys' pattern missing: every command on them is refused.
        let refused: Vec<usize> = (0..uses.len())
            .filter(|i| uses[*i].tokens.iter().any(|t| t == "~seatflow:reconcile:*"))
            .collect();
        assert_eq!(missing_tokens(&uses, &refused), ["~seatflow:reconcile:*"]);
        // Refused although each part is allowed elsewhere.
        assert_eq!(
            missing_tokens(&uses, &[index("get", "seat:")]),
            ["GET seatflow:seat:{0} as a whole"]
        );
    }

    #[test]
    fn words_are_quoted_only_when_redis_cli_would_split_them() {
        assert_eq!(cli_quote("~a:*"), "~a:*");
        assert_eq!(cli_quote("~a b:*"), "\"~a b:*\"");
        assert_eq!(cli_quote("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(cli_quote(""), "\"\"");
    }
}
