//! The script registry: every Lua script embedded once, with its Redis
//! Cluster variant, and the public list operators can audit.

use std::sync::OnceLock;

use redis::Script;

/// The source of one script: `protocol.lua` (the protocol version check,
/// which must run before any key is touched) first, then the shared code
/// the operation calls, then the operation's own file.
macro_rules! lua {
    ($($file:literal),+) => {
        concat!(
            include_str!("lua/protocol.lua"),
            $(include_str!(concat!("lua/", $file))),+
        )
    };
}

const ACQUIRE_LUA: &str = lua!("acquire.lua");
const EXTEND_LUA: &str = lua!("extend.lua");
/// `wake_next.lua` defines the function both of these call.
const RELEASE_LUA: &str = lua!("wake_next.lua", "release.lua");
const PASS_LUA: &str = lua!("wake_next.lua", "pass.lua");

/// Every kind of lock (`Client::status` and `force_unlock` are views of
/// these two).
const INSPECT_LUA: &str = lua!("inspect.lua");
const BREAK_LOCK_LUA: &str = lua!("wake_next.lua", "fair_common.lua", "break_lock.lua");

/// `fair_common.lua` defines the functions the fair scripts call.
const FAIR_ACQUIRE_LUA: &str = lua!("fair_common.lua", "fair_acquire.lua");
const FAIR_RELEASE_LUA: &str = lua!("fair_common.lua", "fair_release.lua");
const FAIR_PASS_LUA: &str = lua!("fair_common.lua", "fair_pass.lua");

const RW_READ_ACQUIRE_LUA: &str = lua!("rw_read_acquire.lua");
const RW_WRITE_ACQUIRE_LUA: &str = lua!("rw_write_acquire.lua");
const RW_READ_RELEASE_LUA: &str = lua!("rw_read_release.lua");
const RW_WRITE_RELEASE_LUA: &str = lua!("rw_write_release.lua");
const RW_READ_EXTEND_LUA: &str = lua!("rw_read_extend.lua");
const RW_PASS_LUA: &str = lua!("rw_pass.lua");

/// `sem_common.lua` defines the functions (and the holders set's grace)
/// the semaphore scripts that write call.
const SEM_ACQUIRE_LUA: &str = lua!("sem_common.lua", "sem_acquire.lua");
const SEM_RELEASE_LUA: &str = lua!("sem_common.lua", "sem_release.lua");
const SEM_PASS_LUA: &str = lua!("sem_common.lua", "sem_pass.lua");
const SEM_EXTEND_LUA: &str = lua!("sem_common.lua", "sem_extend.lua");
const SEM_STATUS_LUA: &str = lua!("sem_status.lua");
const ELECT_LEADER_LUA: &str = lua!("elect_leader.lua");
const ELECT_PROCLAIM_LUA: &str = lua!("elect_proclaim.lua");
const ELECT_RESIGN_LUA: &str = lua!("elect_resign.lua");

/// One embedded script: its name (the file's), its source (with any
/// shared code prepended) and, once first used, its SHA1.
pub(crate) struct Lua {
    pub(crate) name: &'static str,
    source: &'static str,
    script: OnceLock<Script>,
    /// The Redis Cluster variant: `PUBLISH` becomes `SPUBLISH` (sharded
    /// pub/sub, delivered only inside the lock's shard).
    sharded: OnceLock<(String, Script)>,
}

impl Lua {
    const fn new(name: &'static str, source: &'static str) -> Lua {
        Lua {
            name,
            source,
            script: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source))
    }

    /// The source and script to run on a single server or on a cluster.
    pub(crate) fn variant(&self, cluster: bool) -> (&str, &Script) {
        if cluster {
            let (source, script) = self.sharded.get_or_init(|| {
                let source = self.source.replace("'PUBLISH'", "'SPUBLISH'");
                let script = Script::new(&source);
                (source, script)
            });
            (source, script)
        } else {
            (self.source, self.script())
        }
    }
}

pub(crate) static ACQUIRE: Lua = Lua::new("acquire", ACQUIRE_LUA);
pub(crate) static RELEASE: Lua = Lua::new("release", RELEASE_LUA);
pub(crate) static EXTEND: Lua = Lua::new("extend", EXTEND_LUA);
pub(crate) static PASS: Lua = Lua::new("pass", PASS_LUA);
pub(crate) static FAIR_ACQUIRE: Lua = Lua::new("fair_acquire", FAIR_ACQUIRE_LUA);
pub(crate) static FAIR_RELEASE: Lua = Lua::new("fair_release", FAIR_RELEASE_LUA);
pub(crate) static FAIR_PASS: Lua = Lua::new("fair_pass", FAIR_PASS_LUA);
pub(crate) static RW_READ_ACQUIRE: Lua = Lua::new("rw_read_acquire", RW_READ_ACQUIRE_LUA);
pub(crate) static RW_WRITE_ACQUIRE: Lua = Lua::new("rw_write_acquire", RW_WRITE_ACQUIRE_LUA);
pub(crate) static RW_READ_RELEASE: Lua = Lua::new("rw_read_release", RW_READ_RELEASE_LUA);
pub(crate) static RW_WRITE_RELEASE: Lua = Lua::new("rw_write_release", RW_WRITE_RELEASE_LUA);
pub(crate) static RW_READ_EXTEND: Lua = Lua::new("rw_read_extend", RW_READ_EXTEND_LUA);
pub(crate) static RW_PASS: Lua = Lua::new("rw_pass", RW_PASS_LUA);
pub(crate) static INSPECT: Lua = Lua::new("inspect", INSPECT_LUA);
pub(crate) static BREAK_LOCK: Lua = Lua::new("break_lock", BREAK_LOCK_LUA);

pub(crate) static SEM_ACQUIRE: Lua = Lua::new("sem_acquire", SEM_ACQUIRE_LUA);
pub(crate) static SEM_RELEASE: Lua = Lua::new("sem_release", SEM_RELEASE_LUA);
pub(crate) static SEM_PASS: Lua = Lua::new("sem_pass", SEM_PASS_LUA);
pub(crate) static SEM_EXTEND: Lua = Lua::new("sem_extend", SEM_EXTEND_LUA);
pub(crate) static SEM_STATUS: Lua = Lua::new("sem_status", SEM_STATUS_LUA);

pub(crate) static ELECT_LEADER: Lua = Lua::new("elect_leader", ELECT_LEADER_LUA);
pub(crate) static ELECT_PROCLAIM: Lua = Lua::new("elect_proclaim", ELECT_PROCLAIM_LUA);
pub(crate) static ELECT_RESIGN: Lua = Lua::new("elect_resign", ELECT_RESIGN_LUA);

/// Every script, in the order [`scripts()`] lists them.
static ALL: [&Lua; 23] = [
    &ACQUIRE,
    &RELEASE,
    &EXTEND,
    &PASS,
    &FAIR_ACQUIRE,
    &FAIR_RELEASE,
    &FAIR_PASS,
    &RW_READ_ACQUIRE,
    &RW_WRITE_ACQUIRE,
    &RW_READ_RELEASE,
    &RW_WRITE_RELEASE,
    &RW_READ_EXTEND,
    &RW_PASS,
    &INSPECT,
    &BREAK_LOCK,
    &SEM_ACQUIRE,
    &SEM_RELEASE,
    &SEM_PASS,
    &SEM_EXTEND,
    &SEM_STATUS,
    &ELECT_LEADER,
    &ELECT_PROCLAIM,
    &ELECT_RESIGN,
];

/// One of the Lua scripts redbell runs on the server.
///
/// Listed by [`scripts()`] for operators who want to pre-load them
/// (`SCRIPT LOAD`) or audit what runs on their servers. On Redis Cluster the
/// scripts that publish run in a variant with `SPUBLISH` for `PUBLISH`
/// (another SHA1); redbell loads whatever is missing itself.
#[derive(Debug, Clone, Copy)]
pub struct ScriptInfo {
    /// The operation's name, as in `scripts/lua/<name>.lua`.
    pub name: &'static str,
    /// The Lua source.
    pub source: &'static str,
    /// The SHA1 hex digest `EVALSHA` uses.
    pub sha1: &'static str,
}

/// Every Lua script redbell runs, with its SHA1.
pub fn scripts() -> Vec<ScriptInfo> {
    ALL.iter()
        .map(|lua| ScriptInfo {
            name: lua.name,
            source: lua.source,
            sha1: lua.script().get_hash(),
        })
        .collect()
}
