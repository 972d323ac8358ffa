//! Error messages as the user reads them: each cause once.

/// The error and its causes joined by ": ", leaving out a cause whose text the message
/// already holds (an error that prints its source, as `"cannot open {path}: {source}"` does,
/// would otherwise show it twice).
pub fn error_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if text.is_empty() || message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    /// Prints its source in its own message, as thiserror's `{source}` does.
    #[derive(Debug)]
    struct Open {
        path: String,
        source: std::io::Error,
    }
    impl std::fmt::Display for Open {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "cannot open {}: {}", self.path, self.source)
        }
    }
    impl std::error::Error for Open {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::other("No such device");
        let e = Err::<(), _>(Open {
            path: "/tmp".into(),
            source: io,
        })
        .context("loading the model")
        .unwrap_err();
        assert_eq!(
            error_message(&e),
            "loading the model: cannot open /tmp: No such device"
        );
        let plain = anyhow::anyhow!("disk full").context("writing x");
        assert_eq!(error_message(&plain), "writing x: disk full");
    }
}
