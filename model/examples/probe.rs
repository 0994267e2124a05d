use redbell_model::client::Kind;
use redbell_model::presets;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let h: u64 = a[1].parse().unwrap();
    let f: u8 = a[2].parse().unwrap();
    let tasks: Vec<u8> = a[3].split(',').map(|x| x.parse().unwrap()).collect();
    let kind = match a.get(4).map(String::as_str) { Some("fair") => Kind::Fair, Some("rw") => Kind::RwLock, _ => Kind::Mutex };
    let mut cfg = presets::config(kind, &tasks, h, f);
    if let Some(only) = a.get(6) {
        let mut fs = redbell_model::client::Faults::NONE;
        match only.as_str() { "freeze" => fs.freeze = true, "die" => fs.die = true, "cancel" => fs.cancel = true, "resend" => fs.resend = true, _ => fs.short_extend = true }
        cfg.faults = fs;
    }
    let o = redbell_model::check(cfg, 2);
    println!("h{h} f{f} {tasks:?}: {} states depth {} {:?}", o.states, o.depth, o.elapsed);
    for (p, t) in &o.counterexamples { println!("{p}:\n{}", if a.get(5).is_some() { t.as_str() } else { "" }); }
}
