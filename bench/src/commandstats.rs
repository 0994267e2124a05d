//! Reading `INFO commandstats`, shared by the demo and the bench.

/// Commands that run a script: one round trip each, whatever the script
/// calls inside (Redis counts those under their own names).
pub const SCRIPT_CALLS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// Calls per command from the text of `INFO commandstats`, with names as
/// Redis gives them (`evalsha`, `config|resetstat`, ...).
pub fn parse(info: &str) -> Vec<(String, u64)> {
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// The server's CPU time so far, in µs: `used_cpu_sys + used_cpu_user`
/// from the text of `INFO cpu` (0 when absent).
pub fn cpu_us(info: &str) -> f64 {
    info.lines()
        .filter_map(|line| {
            let (name, value) = line.trim().split_once(':')?;
            matches!(name, "used_cpu_sys" | "used_cpu_user")
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum::<f64>()
        * 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu() {
        let info = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\nused_cpu_sys_children:9\r\n";
        assert!((cpu_us(info) - 1_750_000.0).abs() < 1e-3);
    }

    #[test]
    fn parses_calls() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=12,usec=3,usec_per_call=0.25\r\n\
                    cmdstat_config|resetstat:calls=1,usec=5\r\nnoise\r\n";
        assert_eq!(
            parse(info),
            vec![("evalsha".into(), 12), ("config|resetstat".into(), 1)]
        );
    }
}
