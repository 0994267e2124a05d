//! The wire side: the real scripts (assembled as `src/scripts/registry.rs`
//! assembles them), each lock name's keys and channels, and the
//! translation between the model's values and the strings Redis holds.

use std::collections::HashMap;
use std::path::Path;

use redbell_model::scripts::{FairMember, LockValue, Member, Message, Token};
use redis::Value;

/// Every script of the registry: name -> (SHA1, source).
pub struct Scripts(HashMap<String, (String, String)>);

impl Scripts {
    /// Reads `src/scripts/registry.rs`, assembles each script from the
    /// `.lua` parts its `const` lists (in that order, after those its
    /// `lua!` macro prepends to every script, as `concat!` does) and loads
    /// it into the server (SCRIPT LOAD), so a change to the files or to the
    /// registry's rules reaches this test.
    pub fn load(con: &mut redis::Connection) -> Scripts {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/scripts");
        let registry = std::fs::read_to_string(root.join("registry.rs")).expect("registry.rs");
        let literals = |text: &str, after: &str| -> Vec<String> {
            text.split(after)
                .skip(1)
                .map(|piece| piece[..piece.find('"').expect("closing quote")].to_owned())
                .collect()
        };
        // `macro_rules! lua`: the files every script opens with, and the
        // folder the listed files are in.
        let (common, folder) = match registry.find("macro_rules! lua") {
            Some(at) => {
                let body = &registry[at..];
                let body = &body[..body.find("};").unwrap_or(body.len())];
                let (before, each) = body.split_once("$(").unwrap_or((body, ""));
                let folder = literals(each, "concat!(\"").pop().unwrap_or_default();
                (literals(before, "include_str!(\""), folder)
            }
            None => (Vec::new(), String::new()),
        };
        let mut parts: HashMap<&str, String> = HashMap::new();
        let mut rest = registry.as_str();
        // `const NAME_LUA: &str = lua!("a.lua", ..);` or
        // `= concat!(include_str!("lua/a.lua"), ..);`
        while let Some(at) = rest.find("const ") {
            rest = &rest[at + 6..];
            let Some(colon) = rest.find(':') else { break };
            let name = rest[..colon].trim();
            let body = &rest[..rest.find(';').unwrap_or(rest.len())];
            let Some(expr) = body.split_once('=').map(|(_, e)| e.trim()) else {
                continue;
            };
            let files: Vec<String> = if let Some(args) = expr.strip_prefix("lua!(") {
                let listed = args.split('"').skip(1).step_by(2);
                common
                    .iter()
                    .cloned()
                    .chain(listed.map(|f| format!("{folder}{f}")))
                    .collect()
            } else {
                literals(expr, "include_str!(\"")
            };
            if !name.ends_with("_LUA") || files.is_empty() {
                continue;
            }
            let mut source = String::new();
            for file in files {
                source += &std::fs::read_to_string(root.join(&file))
                    .unwrap_or_else(|e| panic!("{file}: {e}"));
            }
            parts.insert(name, source);
        }
        let mut shas = HashMap::new();
        // `static X: Lua = Lua::new("name", NAME_LUA);`
        for piece in registry.split("Lua::new(\"").skip(1) {
            let name = &piece[..piece.find('"').expect("closing quote")];
            let after = &piece[name.len() + 1..];
            let konst = after[..after.find(')').expect("closing paren")]
                .trim_start_matches(',')
                .trim();
            let source = parts
                .get(konst)
                .unwrap_or_else(|| panic!("registry.rs: {name}'s source {konst} not understood"));
            shas.insert(name.to_owned(), (script_load(con, source), source.clone()));
        }
        assert!(shas.len() >= 20, "only {:?} in registry.rs", shas.keys());
        Scripts(shas)
    }

    /// The SHA1 of script `name`.
    pub fn sha(&self, name: &str) -> &str {
        &self
            .0
            .get(name)
            .unwrap_or_else(|| panic!("no script {name} in registry.rs"))
            .0
    }

    /// Loads `name` again (another test flushed the server's scripts).
    pub fn reload(&self, con: &mut redis::Connection, name: &str) {
        script_load(con, &self.0[name].1);
    }
}

fn script_load(con: &mut redis::Connection, source: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query(con)
        .unwrap_or_else(|e| panic!("SCRIPT LOAD: {e}"))
}

/// The keys and channels of one lock name (`keys.rs`'s `LockKeys`, every
/// kind's at once), under the prefix `trace`; each field is named after
/// its `LockKeys` field or its key's suffix.
#[derive(Clone, Debug)]
pub struct Names {
    pub lock: String,
    pub fence: String,
    pub waiters: String,
    pub fifo: String,
    pub handoff: String,
    pub readers: String,
    pub holders: String,
    pub intents: String,
    pub count: String,
    pub queue: String,
    pub queue_expiry: String,
    pub rw: String,
    pub wake_prefix: String,
    /// Not the protocol's: the channel the replay publishes a marker on
    /// after each step, to know it has read every message before it.
    pub ctl: String,
}

impl Names {
    pub fn new(name: &str) -> Names {
        let base = format!("trace:{{{name}}}");
        Names {
            fence: format!("{base}:fence"),
            waiters: format!("{base}:waiters"),
            fifo: format!("{base}:fifo"),
            handoff: format!("{base}:handoff"),
            readers: format!("{base}:readers"),
            holders: format!("{base}:holders"),
            intents: format!("{base}:writers"),
            count: format!("{base}:permits"),
            queue: format!("{base}:queue"),
            queue_expiry: format!("{base}:queue:expiry"),
            rw: format!("{base}:rw"),
            wake_prefix: format!("{base}:wake:"),
            ctl: format!("{base}:trace-ctl"),
            lock: base,
        }
    }

    /// Every key, to delete at the end.
    pub fn keys(&self) -> [&str; 11] {
        [
            &self.count,
            &self.queue,
            &self.queue_expiry,
            &self.lock,
            &self.fence,
            &self.waiters,
            &self.fifo,
            &self.handoff,
            &self.readers,
            &self.intents,
            &self.holders,
        ]
    }

    pub fn wake(&self, client: u8) -> String {
        format!("{}{client}", self.wake_prefix)
    }
}

/// A token on the wire: the kind's letter (acquire.rs `Tokens`), then the
/// number, fixed width so that string order is number order.
pub fn token(letter: char, t: Token) -> String {
    format!("{letter}t{:05}", t.0)
}

pub fn parse_token(s: &str) -> Option<Token> {
    s.get(2..)?.parse().ok().map(Token)
}

pub fn member(m: Member) -> String {
    format!("{}:{}", m.client, m.waiter)
}

pub fn parse_member(s: &str) -> Option<Member> {
    let (c, w) = s.split_once(':')?;
    Some(Member {
        client: c.parse().ok()?,
        waiter: w.parse().ok()?,
    })
}

pub fn fair_member(m: FairMember) -> String {
    match m {
        FairMember::Long => "~".to_owned(),
        FairMember::Waiter(m, t) => format!("{}:{}", member(m), token('q', t)),
    }
}

pub fn parse_fair_member(s: &str) -> Option<FairMember> {
    if s == "~" {
        return Some(FairMember::Long);
    }
    let (m, t) = s.rsplit_once(':')?;
    Some(FairMember::Waiter(parse_member(m)?, parse_token(t)?))
}

/// The lock key's value: a token, or a reservation `m:<member>@<end>`.
pub fn lock_value(letter: char, v: LockValue) -> String {
    match v {
        LockValue::Token(t) => token(letter, t),
        LockValue::Reserved { member: m, end } => format!("m:{}@{end}", member(m)),
    }
}

pub fn parse_lock_value(s: &str) -> Option<LockValue> {
    if let Some(r) = s.strip_prefix("m:") {
        let (m, end) = r.rsplit_once('@')?;
        return Some(LockValue::Reserved {
            member: parse_member(m)?,
            end: end.parse().ok()?,
        });
    }
    parse_token(s).map(LockValue::Token)
}

/// A message as the client reads it off its wake channel (or the RwLock's
/// channel, `rw`), in the model's terms.
pub fn parse_message(rw: bool, payload: &str) -> Option<Message> {
    if rw {
        return (payload.len() == 1).then(|| Message::RwReleased(payload.as_bytes()[0]));
    }
    if let Some(w) = payload.strip_suffix(":?") {
        return Some(Message::Probe(w.parse().ok()?));
    }
    if let Some((w, win)) = payload.split_once("::s") {
        return Some(Message::Standby(w.parse().ok()?, win.parse().ok()?));
    }
    let mut fields = payload.split(':');
    let w = fields.next()?.parse().ok()?;
    let Some(t) = fields.next() else {
        return Some(Message::Wake(w));
    };
    let t = parse_token(t)?;
    let third = fields.next()?;
    if let Some(f) = third.strip_prefix('g') {
        let end = fields.next()?.parse().ok()?;
        return Some(Message::Grant(w, t, f.parse().ok()?, end));
    }
    Some(Message::FairStandby(
        w,
        t,
        third.strip_prefix('s')?.parse().ok()?,
    ))
}

/// A script's reply, simplified: integers, strings, nil, arrays, errors.
#[derive(Clone, Debug, PartialEq)]
pub enum Wire {
    Int(i64),
    Str(String),
    Nil,
    Arr(Vec<Wire>),
    Err(String),
}

impl Wire {
    pub fn from(v: Value) -> Wire {
        match v {
            Value::Int(i) => Wire::Int(i),
            Value::BulkString(b) => Wire::Str(String::from_utf8_lossy(&b).into_owned()),
            Value::SimpleString(s) => Wire::Str(s),
            Value::Okay => Wire::Str("OK".into()),
            Value::Array(a) | Value::Set(a) => Wire::Arr(a.into_iter().map(Wire::from).collect()),
            Value::ServerError(e) => Wire::Err(format!("{e:?}")),
            Value::Nil => Wire::Nil,
            other => Wire::Err(format!("unexpected {other:?}")),
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Wire::Int(i) => Some(*i),
            Wire::Str(s) => s.parse().ok(),
            _ => None,
        }
    }

    pub fn str(&self) -> Option<&str> {
        match self {
            Wire::Str(s) => Some(s),
            _ => None,
        }
    }

    /// ZRANGE .. WITHSCORES as (member, score) pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Wire::Arr(a) => a
                .chunks(2)
                .filter_map(|p| Some((p[0].str()?.to_owned(), p.get(1)?.str()?.to_owned())))
                .collect(),
            _ => Vec::new(),
        }
    }
}
