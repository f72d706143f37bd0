//! The command line the examples share: `--listen ADDR` and a few `--NAME VALUE` flags.

/// Parsed flags: `--listen ADDR` and any `--NAME VALUE` pairs the example allows.
pub struct Args {
    pub listen: String,
    values: Vec<(String, String)>,
}

impl Args {
    /// Reads `std::env::args()`. `allowed` names the flags besides `--listen`.
    #[allow(dead_code)]
    pub fn parse(default_listen: &str, allowed: &[&str]) -> Result<Args, String> {
        Args::parse_from(std::env::args().skip(1), default_listen, allowed)
    }

    /// Reads flags from `args`.
    pub fn parse_from(
        mut args: impl Iterator<Item = String>,
        default_listen: &str,
        allowed: &[&str],
    ) -> Result<Args, String> {
        let mut parsed = Args {
            listen: default_listen.to_owned(),
            values: Vec::new(),
        };
        while let Some(arg) = args.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
                None => (arg.clone(), None),
            };
            let Some(flag) = name.strip_prefix("--") else {
                return Err(format!("unexpected argument `{arg}`"));
            };
            if flag != "listen" && !allowed.contains(&flag) {
                return Err(format!(
                    "unknown flag `{name}`; flags: --listen ADDR{}",
                    allowed
                        .iter()
                        .map(|a| format!(" --{a} N"))
                        .collect::<String>()
                ));
            }
            let value = match inline {
                Some(v) => v,
                None => args
                    .next()
                    .ok_or_else(|| format!("`{name}` needs a value"))?,
            };
            if flag == "listen" {
                parsed.listen = value;
            } else {
                parsed.values.push((flag.to_owned(), value));
            }
        }
        Ok(parsed)
    }

    /// The text given for `--name`, or `default`.
    #[allow(dead_code)]
    pub fn text(&self, name: &str, default: &str) -> String {
        match self.values.iter().rev().find(|(n, _)| n == name) {
            Some((_, v)) => v.clone(),
            None => default.to_owned(),
        }
    }

    /// Every text given for `--name`, in order (the flag may be repeated).
    #[allow(dead_code)]
    pub fn all(&self, name: &str) -> Vec<String> {
        self.values
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The number given for `--name`, or `default`.
    #[allow(dead_code)]
    pub fn number(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.values.iter().rev().find(|(n, _)| n == name) {
            Some((_, v)) => v
                .parse()
                .map_err(|_| format!("--{name} takes a number, not `{v}`")),
            None => Ok(default),
        }
    }
}
