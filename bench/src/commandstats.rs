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

#[cfg(test)]
mod tests {
    use super::*;

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
