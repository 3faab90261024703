//! Text and JSON output as iproute2 writes them (`lib/json_print.c` over
//! `lib/json_writer.c`): every value is printed once for both modes, with
//! a text format or a JSON key; `-j` gives one array of objects, `-p`
//! indents it by four spaces a level with iproute2's spacing (`[ {`,
//! `} ]`), and text lines keep iproute2's trailing space.

use std::fmt::Write as _;

/// One command's output (text or JSON), written at the end.
pub struct Out {
    json: bool,
    pretty: bool,
    buf: String,
    depth: usize,
    /// `json_writer`'s `sep`: a comma is owed before the next element.
    sep: bool,
}

impl Out {
    /// Starts the output (`new_json_obj`: a JSON array).
    pub fn new(json: bool, pretty: bool) -> Out {
        let mut o = Out { json, pretty, buf: String::new(), depth: 0, sep: false };
        if json {
            o.start_array();
        }
        o
    }

    /// Whether this is JSON.
    pub fn is_json(&self) -> bool {
        self.json
    }

    fn eor(&mut self) {
        if self.sep {
            self.buf.push(',');
        }
        self.sep = true;
    }

    fn eol(&mut self) {
        if self.pretty {
            self.buf.push('\n');
            for _ in 0..self.depth {
                self.buf.push_str("    ");
            }
        }
    }

    fn begin(&mut self, c: char) {
        self.eor();
        self.buf.push(c);
        self.depth += 1;
        self.sep = false;
    }

    fn end(&mut self, c: char) {
        self.depth = self.depth.saturating_sub(1);
        if self.sep {
            self.eol();
        }
        self.buf.push(c);
        self.sep = true;
    }

    fn start_array(&mut self) {
        self.begin('[');
        if self.pretty {
            self.buf.push(' ');
        }
    }

    fn end_array(&mut self) {
        if self.pretty && self.sep {
            self.buf.push(' ');
        }
        self.sep = false;
        self.end(']');
    }

    fn puts(&mut self, s: &str) {
        self.buf.push('"');
        for c in s.chars() {
            match c {
                '\t' => self.buf.push_str("\\t"),
                '\n' => self.buf.push_str("\\n"),
                '\r' => self.buf.push_str("\\r"),
                '\u{c}' => self.buf.push_str("\\f"),
                '\u{8}' => self.buf.push_str("\\b"),
                '\\' => self.buf.push_str("\\\\"),
                '"' => self.buf.push_str("\\\""),
                c => self.buf.push(c),
            }
        }
        self.buf.push('"');
    }

    fn name(&mut self, key: &str) {
        self.eor();
        self.eol();
        self.sep = false;
        self.puts(key);
        self.buf.push(':');
        if self.pretty {
            self.buf.push(' ');
        }
    }

    fn key(&mut self, key: Option<&str>) {
        if let Some(k) = key {
            self.name(k);
        }
    }

    /// `open_json_object(NULL)`.
    pub fn open_object(&mut self) {
        if self.json {
            self.begin('{');
        }
    }

    /// `newline()`: ends the object (JSON) or the line (text).
    pub fn newline(&mut self) {
        if self.json {
            self.end('}');
        } else {
            self.buf.push('\n');
        }
    }

    /// `newline_indent()`.
    pub fn newline_indent(&mut self) {
        self.newline();
        self.text("    ");
    }

    /// Text only (`PRINT_FP`).
    pub fn text(&mut self, s: &str) {
        if !self.json {
            self.buf.push_str(s);
        }
    }

    /// A number under `key` in JSON, `text` in text (`PRINT_ANY`).
    pub fn uint(&mut self, key: Option<&str>, text: Option<&str>, v: u64) {
        if self.json {
            self.key(key);
            self.eor();
            let _ = write!(self.buf, "{v}");
        } else if let Some(t) = text {
            self.buf.push_str(t);
        }
    }

    /// A number in JSON only (`PRINT_JSON`).
    pub fn json_uint(&mut self, key: &str, v: u64) {
        if self.json {
            self.uint(Some(key), None, v);
        }
    }

    /// A string under `key` in JSON, `text` in text (`PRINT_ANY`).
    pub fn string(&mut self, key: Option<&str>, text: Option<&str>, v: &str) {
        if self.json {
            self.key(key);
            self.eor();
            self.puts(v);
        } else if let Some(t) = text {
            self.buf.push_str(t);
        }
    }

    /// `print_on_off`: `true`/`false` in JSON, `text` in text.
    pub fn on_off(&mut self, key: &str, text: &str, v: bool) {
        if self.json {
            self.name(key);
            self.eor();
            self.buf.push_str(if v { "true" } else { "false" });
        } else {
            self.buf.push_str(text);
        }
    }

    /// iproute2's `res_print_u64`: `NAME N ` in text, `"NAME":N` in JSON.
    pub fn field(&mut self, name: &str, v: u64) {
        self.uint(Some(name), Some(&format!("{name} {v} ")), v);
    }

    /// A bit list (`caps`): `\n    caps: <A, B>` in text, `"caps":["A","B"]` in JSON.
    pub fn caps(&mut self, names: &[&str]) {
        if self.json {
            self.name("caps");
            self.start_array();
            for n in names {
                self.eor();
                self.puts(n);
            }
            self.end_array();
        } else {
            let _ = write!(self.buf, "\n    caps: <{}>", names.join(", "));
        }
    }

    /// The whole output (`delete_json_obj`: the array closed, a newline).
    pub fn finish(mut self) -> String {
        if self.json {
            self.end_array();
            self.buf.push('\n');
        }
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::Out;

    fn link(o: &mut Out, i: u64, name: &str) {
        o.open_object();
        o.json_uint("ifindex", i);
        o.string(Some("ifname"), Some(&format!("link {name}/")), name);
        o.uint(Some("port"), Some("1 "), 1);
        o.string(Some("state"), Some("state ACTIVE "), "ACTIVE");
        o.newline();
    }

    /// The three shapes of iproute2's output for two objects, byte for
    /// byte as `json_writer.c` writes them.
    #[test]
    fn text_json_and_pretty_json_are_iproute2s() {
        for (json, pretty, want) in [
            (false, false, "link a/1 state ACTIVE \nlink b\"/1 state ACTIVE \n"),
            (
                true,
                false,
                "[{\"ifindex\":0,\"ifname\":\"a\",\"port\":1,\"state\":\"ACTIVE\"},\
                 {\"ifindex\":1,\"ifname\":\"b\\\"\",\"port\":1,\"state\":\"ACTIVE\"}]\n",
            ),
            (
                true,
                true,
                "[ {\n        \"ifindex\": 0,\n        \"ifname\": \"a\",\n        \"port\": 1,\n        \
                 \"state\": \"ACTIVE\"\n    },{\n        \"ifindex\": 1,\n        \"ifname\": \"b\\\"\",\n        \
                 \"port\": 1,\n        \"state\": \"ACTIVE\"\n    } ]\n",
            ),
        ] {
            let mut o = Out::new(json, pretty);
            link(&mut o, 0, "a");
            link(&mut o, 1, "b\"");
            assert_eq!(o.finish(), want, "json {json} pretty {pretty}");
        }
        assert_eq!(Out::new(true, false).finish(), "[]\n");
        assert_eq!(Out::new(true, true).finish(), "[ ]\n");
        assert_eq!(Out::new(false, false).finish(), "");
        let mut o = Out::new(true, false);
        o.open_object();
        o.caps(&["CM"]);
        o.on_off("adaptive-moderation", "adaptive-moderation off ", false);
        o.newline();
        assert_eq!(o.finish(), "[{\"caps\":[\"CM\"],\"adaptive-moderation\":false}]\n");
    }
}
