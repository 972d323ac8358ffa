//! Backslash escapes shared by `echo -e`, `printf` and `$'...'` quoting.

/// Interprets backslash escapes as `echo -e` and `printf %b` do (`printf_format`: as printf's
/// format and `$'...'` do). The flag is false when `\c` ended the output.
pub(super) fn backslash_escapes(s: &str, printf_format: bool) -> (String, bool) {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' || i >= chars.len() {
            out.push(c);
            continue;
        }
        let e = chars[i];
        i += 1;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            'e' | 'E' => out.push('\x1b'),
            '\\' => out.push('\\'),
            '"' | '\'' if printf_format => out.push(e),
            'c' if !printf_format => return (out, false),
            'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 && i < chars.len() && chars[i].is_ascii_hexdigit() {
                    v = v * 16 + chars[i].to_digit(16).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                if n == 0 {
                    out.push_str("\\x");
                } else {
                    out.push(char::from_u32(v).unwrap_or('?'));
                }
            }
            '0'..='7' => {
                // echo takes `\0NNN`, printf takes `\NNN`.
                let mut v = 0u32;
                let mut n = 0;
                let max = if e == '0' && !printf_format { 3 } else { 2 };
                if e != '0' || printf_format {
                    v = e.to_digit(8).unwrap_or(0);
                }
                if e != '0' && !printf_format {
                    out.push('\\');
                    out.push(e);
                    continue;
                }
                while n < max && i < chars.len() && ('0'..='7').contains(&chars[i]) {
                    v = v * 8 + chars[i].to_digit(8).unwrap_or(0);
                    i += 1;
                    n += 1;
                }
                out.push(char::from_u32(v & 0xff).unwrap_or('?'));
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    (out, true)
}
