//! A small synchronous Chrome DevTools Protocol client for browser tests.
//!
//! Drives headless Chromium over `--remote-debugging-pipe`: the browser reads NUL-terminated
//! JSON messages from its fd 3 and writes NUL-terminated JSON messages to its fd 4. No
//! websocket, no driver process, no browser-driving crate. One page is opened per [`Browser`]
//! (`Target.createTarget` + `Target.attachToTarget` with `flatten: true`); page commands carry
//! that session's `sessionId`.
//!
//! Meant to be included in integration tests as `mod support { pub mod cdp; }`. Every wait is
//! bounded; dropping the [`Browser`] closes Chromium (killing it if it lingers) and removes its
//! temporary profile directory.

// A test support module: not every test binary that includes it uses every item.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// Default bound for a single protocol command, a navigation and launching the browser.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How often [`Browser::wait_for`] re-evaluates its condition.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How many protocol events are buffered before the oldest are dropped.
const MAX_EVENTS: usize = 1000;

/// How many console/log lines are kept for [`Browser::logs`] and error messages.
const MAX_LOGS: usize = 50;

/// How long [`Drop`] waits for Chromium to exit after `Browser.close` before killing it.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The Chromium executable to use: `FLOW_CHROMIUM` if set (and non-empty), else `chromium` or
/// `chromium-browser` found on `PATH`.
pub fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FLOW_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let dirs = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::split_paths(&dirs)
            .map(|dir| dir.join(name))
            .find(|candidate| is_executable(candidate))
    })
}

/// Whether `path` is a regular file with an execute bit set.
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why a protocol command failed.
enum CallError {
    /// The browser answered with a protocol error (the page may still be usable).
    Protocol(String),
    /// No answer: timeout, closed pipe or crashed page (the browser is not usable).
    Transport(String),
}

impl CallError {
    /// The human-readable message.
    fn into_message(self) -> String {
        match self {
            CallError::Protocol(message) | CallError::Transport(message) => message,
        }
    }
}

/// A headless Chromium with one page, driven over the DevTools pipe.
pub struct Browser {
    /// The browser process (the wrapper script `exec`s it, so this is Chromium itself).
    child: Child,
    /// Write end of the pipe Chromium reads commands from (its fd 3); `None` once closed.
    to_browser: Option<File>,
    /// Messages parsed by the reader thread from Chromium's fd 4.
    from_browser: Receiver<Result<Value, String>>,
    /// The id of the next command.
    next_id: u64,
    /// The flat session of the page.
    session: String,
    /// Events received while waiting for responses, oldest first.
    events: VecDeque<Value>,
    /// Recent console messages, uncaught exceptions and browser log entries of the page.
    logs: VecDeque<String>,
    /// Set when the page crashed or was detached: later commands fail at once.
    dead: Option<String>,
    /// Temporary directory holding the profile (`profile/`) and Chromium's `stderr.log`.
    temp_dir: PathBuf,
}

impl Browser {
    /// Launches headless Chromium at `path` with a fresh temporary profile and opens one blank
    /// page.
    pub fn launch(path: &Path) -> Result<Browser, String> {
        let temp_dir = fresh_temp_dir()?;
        let profile = temp_dir.join("profile");
        let stderr_path = temp_dir.join("stderr.log");
        let setup = || -> Result<(Child, File, File), String> {
            std::fs::create_dir(&profile)
                .map_err(|e| format!("cannot create {}: {e}", profile.display()))?;
            let stderr = File::create(&stderr_path)
                .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
            // Browser reads commands from `commands_read` (its fd 3) and writes messages to
            // `messages_write` (its fd 4).
            let (commands_read, commands_write) = pipe()?;
            let (messages_read, messages_write) = pipe()?;
            let (fd3, fd4) = (commands_read.as_raw_fd(), messages_write.as_raw_fd());
            let mut command = Command::new(path);
            command
                .args([
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    // /dev/shm is often tiny in containers; Chromium crashes when it fills up.
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--remote-debugging-pipe",
                    "--window-size=1280,900",
                    "--force-device-scale-factor=1",
                    // Full-width, scrollbar-free screenshots, the same whatever the page length.
                    "--hide-scrollbars",
                ])
                .arg(format!("--user-data-dir={}", profile.display()))
                .arg("about:blank")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr);
            // SAFETY: the closure runs in the child between fork and exec, where only
            // async-signal-safe functions may be called: it calls nothing but dup2(2), touches
            // no lock and allocates nothing. `fd3` and `fd4` are open (their `OwnedFd`s outlive
            // `spawn`) and, coming from `pipe()`, are >= 10, so neither dup2 clobbers the
            // other's source. dup2 clears close-on-exec on the copies, so exactly these two
            // pipe ends survive exec as fds 3 and 4; the originals are close-on-exec.
            unsafe {
                command.pre_exec(move || {
                    if libc::dup2(fd3, 3) == -1 || libc::dup2(fd4, 4) == -1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            let child = command
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", path.display()))?;
            // The child's ends are dropped (closed) here, so that the reader sees EOF when
            // Chromium exits.
            drop((commands_read, messages_write));
            Ok((child, File::from(commands_write), File::from(messages_read)))
        };
        let (child, to_browser, messages) = match setup() {
            Ok(parts) => parts,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&temp_dir);
                return Err(e);
            }
        };
        let (sender, from_browser) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("cdp-reader".into())
            .spawn(move || read_messages(messages, sender));
        // From here on, Drop cleans up whatever fails.
        let mut browser = Browser {
            child,
            to_browser: Some(to_browser),
            from_browser,
            next_id: 1,
            session: String::new(),
            events: VecDeque::new(),
            logs: VecDeque::new(),
            dead: None,
            temp_dir,
        };
        reader.map_err(|e| format!("cannot start the DevTools reader thread: {e}"))?;
        let target = browser
            .call("Target.createTarget", json!({"url": "about:blank"}), false)
            .map_err(|e| format!("Chromium did not start: {}", e.into_message()))?;
        let target_id = target["targetId"]
            .as_str()
            .ok_or_else(|| format!("Target.createTarget: no targetId in {target}"))?
            .to_owned();
        let attached = browser
            .call(
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
                false,
            )
            .map_err(CallError::into_message)?;
        browser.session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| format!("Target.attachToTarget: no sessionId in {attached}"))?
            .to_owned();
        for method in ["Page.enable", "Runtime.enable", "Log.enable"] {
            browser
                .call(method, json!({}), true)
                .map_err(CallError::into_message)?;
        }
        browser
            .call(
                "Page.setLifecycleEventsEnabled",
                json!({"enabled": true}),
                true,
            )
            .map_err(CallError::into_message)?;
        Ok(browser)
    }

    /// Navigates the page to `url` and waits for its `load` event.
    pub fn goto(&mut self, url: &str) -> Result<(), String> {
        let deadline = Instant::now() + DEFAULT_TIMEOUT;
        self.events.clear();
        let navigated = self
            .call("Page.navigate", json!({"url": url}), true)
            .map_err(CallError::into_message)?;
        if let Some(error) = navigated["errorText"].as_str().filter(|e| !e.is_empty()) {
            return Err(format!("navigation to {url} failed: {error}"));
        }
        let Some(loader) = navigated["loaderId"].as_str().map(str::to_owned) else {
            // A same-document navigation (only the fragment changed): no new load event.
            return self.wait_for("document.readyState === 'complete'", DEFAULT_TIMEOUT);
        };
        let mut last = String::from("no lifecycle event");
        loop {
            let event = self.next_event(deadline).map_err(|e| {
                format!("navigation to {url} did not load (last lifecycle event: {last}): {e}")
            })?;
            if event["method"] == "Page.lifecycleEvent"
                && event["sessionId"] == self.session.as_str()
                && event["params"]["loaderId"] == loader.as_str()
            {
                let name = event["params"]["name"].as_str().unwrap_or_default();
                if name == "load" {
                    return Ok(());
                }
                last = name.to_owned();
            }
        }
    }

    /// Evaluates `js` in the page (`Runtime.evaluate`, awaiting a returned promise) and returns
    /// its value as JSON (`undefined` becomes `null`; `NaN`, `Infinity`, `-0` and `123n` become
    /// strings). A thrown exception or rejected promise is an `Err` with its text.
    pub fn eval(&mut self, js: &str) -> Result<Value, String> {
        self.evaluate(js, DEFAULT_TIMEOUT)
            .map_err(CallError::into_message)
    }

    /// Polls the JavaScript expression `js_condition` every 100 ms until it is truthy; `Err`
    /// (with its last value or exception) if it still is not once `timeout` has passed.
    /// Exceptions count as not yet true, so the condition may name elements that do not exist
    /// yet.
    pub fn wait_for(&mut self, js_condition: &str, timeout: Duration) -> Result<(), String> {
        let start = Instant::now();
        let deadline = start + timeout;
        let expression = format!("!!({js_condition})");
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let last = match self.evaluate(&expression, remaining.max(POLL_INTERVAL)) {
                Ok(Value::Bool(true)) => return Ok(()),
                Ok(value) => format!("it was {value}"),
                Err(CallError::Protocol(message)) => format!("it failed: {message}"),
                Err(CallError::Transport(message)) => {
                    return Err(format!("waiting for `{js_condition}`: {message}"));
                }
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(format!(
                    "timed out after {:.1?} waiting for `{js_condition}`: {last}{}",
                    start.elapsed(),
                    self.recent_logs()
                ));
            }
            std::thread::sleep(POLL_INTERVAL.min(remaining));
        }
    }

    /// Clicks the first element matching the CSS `selector` (through the element's `click()`);
    /// `Err` if no element matches.
    pub fn click(&mut self, selector: &str) -> Result<(), String> {
        let quoted = Value::from(selector).to_string();
        let found = self.eval(&format!(
            "(() => {{ const el = document.querySelector({quoted}); \
             if (!el) return false; el.click(); return true; }})()"
        ))?;
        if found == Value::Bool(true) {
            Ok(())
        } else {
            Err(format!("click: no element matches `{selector}`"))
        }
    }

    /// Saves a PNG screenshot of the whole page (not just the viewport) to `file`.
    pub fn screenshot(&mut self, file: &Path) -> Result<(), String> {
        let metrics = self
            .call("Page.getLayoutMetrics", json!({}), true)
            .map_err(CallError::into_message)?;
        let size = if metrics["cssContentSize"].is_object() {
            &metrics["cssContentSize"]
        } else {
            &metrics["contentSize"]
        };
        let (width, height) = (size["width"].as_f64(), size["height"].as_f64());
        let (Some(width), Some(height)) = (width, height) else {
            return Err(format!(
                "Page.getLayoutMetrics: no content size in {metrics}"
            ));
        };
        let clip = json!({
            "x": 0,
            "y": 0,
            "width": width.ceil(),
            "height": height.ceil(),
            "scale": 1,
        });
        let params = json!({"format": "png", "captureBeyondViewport": true, "clip": clip});
        let shot = self
            .call("Page.captureScreenshot", params, true)
            .map_err(CallError::into_message)?;
        let data = shot["data"]
            .as_str()
            .ok_or("Page.captureScreenshot: no data in the response")?;
        let png = base64_decode(data).map_err(|e| format!("Page.captureScreenshot: {e}"))?;
        std::fs::write(file, png).map_err(|e| format!("cannot write {}: {e}", file.display()))
    }

    /// Recent console messages, uncaught exceptions and browser log entries (failed requests,
    /// CSP violations, ...) of the page, oldest first; at most the last 50.
    pub fn logs(&self) -> Vec<String> {
        self.logs.iter().cloned().collect()
    }

    /// `Runtime.evaluate` of `js`, bounded by `timeout`; exceptions are `CallError::Protocol`.
    fn evaluate(&mut self, js: &str, timeout: Duration) -> Result<Value, CallError> {
        let params = json!({
            "expression": js,
            "returnByValue": true,
            "awaitPromise": true,
            "userGesture": true,
        });
        let answer = self.call_within("Runtime.evaluate", params, true, timeout)?;
        if let Some(details) = answer.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or_else(|| details["exception"]["value"].as_str())
                .or_else(|| details["text"].as_str())
                .unwrap_or("exception");
            return Err(CallError::Protocol(format!("`{js}` threw: {text}")));
        }
        let result = &answer["result"];
        if let Some(special) = result.get("unserializableValue") {
            return Ok(special.clone());
        }
        Ok(result.get("value").cloned().unwrap_or(Value::Null))
    }

    /// Sends `method` (to the page's session if `on_page`) and waits up to [`DEFAULT_TIMEOUT`]
    /// for its result.
    fn call(&mut self, method: &str, params: Value, on_page: bool) -> Result<Value, CallError> {
        self.call_within(method, params, on_page, DEFAULT_TIMEOUT)
    }

    /// Sends `method` (to the page's session if `on_page`) and waits up to `timeout` for its
    /// result, buffering the events received meanwhile.
    fn call_within(
        &mut self,
        method: &str,
        params: Value,
        on_page: bool,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        if let Some(reason) = &self.dead {
            return Err(CallError::Transport(format!("{method}: {reason}")));
        }
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if on_page {
            message["sessionId"] = Value::from(self.session.as_str());
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        let sent = match self.to_browser.as_mut() {
            Some(pipe) => pipe.write_all(&bytes).map_err(|e| e.to_string()),
            None => Err("the pipe is closed".to_owned()),
        };
        if let Err(e) = sent {
            return Err(CallError::Transport(format!(
                "{method}: cannot write to Chromium: {e}{}",
                self.exit_report()
            )));
        }
        let deadline = Instant::now() + timeout;
        loop {
            let message = self
                .receive(deadline)
                .map_err(|e| CallError::Transport(format!("{method}: {e}")))?;
            if message["id"] != id {
                self.push_event(message);
                if let Some(reason) = &self.dead {
                    return Err(CallError::Transport(format!("{method}: {reason}")));
                }
                continue;
            }
            if let Some(error) = message.get("error") {
                let text = error["message"].as_str().unwrap_or("unknown error");
                let data = error["data"].as_str().map(|d| format!(" ({d})"));
                return Err(CallError::Protocol(format!(
                    "{method}: {text}{}",
                    data.unwrap_or_default()
                )));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// The oldest buffered event, or the next one to arrive before `deadline`.
    fn next_event(&mut self, deadline: Instant) -> Result<Value, String> {
        if let Some(event) = self.events.pop_front() {
            return Ok(event);
        }
        if let Some(reason) = &self.dead {
            return Err(reason.clone());
        }
        let message = self.receive(deadline)?;
        self.note(&message);
        Ok(message)
    }

    /// The next message from Chromium, waiting until `deadline` at most.
    fn receive(&mut self, deadline: Instant) -> Result<Value, String> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        match self.from_browser.recv_timeout(timeout) {
            Ok(Ok(message)) => Ok(message),
            Ok(Err(e)) => Err(e),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "no answer from Chromium within {timeout:.1?}{}",
                self.recent_logs()
            )),
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "Chromium closed the DevTools pipe{}",
                self.exit_report()
            )),
        }
    }

    /// Buffers an event received while waiting for a response (and drops late responses to
    /// commands that timed out).
    fn push_event(&mut self, event: Value) {
        if event.get("method").is_none() {
            return;
        }
        self.note(&event);
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(event);
    }

    /// Records log-worthy events of the page in `logs`, and a crash or detach in `dead`.
    fn note(&mut self, event: &Value) {
        let params = &event["params"];
        let of_page = event["sessionId"] == self.session.as_str();
        let line = match event["method"].as_str().unwrap_or_default() {
            "Runtime.consoleAPICalled" if of_page => {
                let args: Vec<String> = params["args"]
                    .as_array()
                    .map(|args| args.iter().map(remote_object_text).collect())
                    .unwrap_or_default();
                format!(
                    "console.{}: {}",
                    params["type"].as_str().unwrap_or("log"),
                    args.join(" ")
                )
            }
            "Runtime.exceptionThrown" if of_page => {
                let details = &params["exceptionDetails"];
                let text = details["exception"]["description"]
                    .as_str()
                    .or_else(|| details["text"].as_str())
                    .unwrap_or("exception");
                format!("uncaught: {text}")
            }
            "Log.entryAdded" if of_page => {
                let entry = &params["entry"];
                let url = entry["url"].as_str().map(|u| format!(" ({u})"));
                format!(
                    "{} {}: {}{}",
                    entry["source"].as_str().unwrap_or("log"),
                    entry["level"].as_str().unwrap_or("info"),
                    entry["text"].as_str().unwrap_or_default(),
                    url.unwrap_or_default()
                )
            }
            "Inspector.targetCrashed" if of_page => {
                self.dead = Some(format!("the page crashed{}", self.recent_logs()));
                return;
            }
            "Target.detachedFromTarget" if params["sessionId"] == self.session.as_str() => {
                self.dead = Some("the page was detached (closed?)".to_owned());
                return;
            }
            _ => return,
        };
        if self.logs.len() == MAX_LOGS {
            self.logs.pop_front();
        }
        self.logs.push_back(line);
    }

    /// The last few log lines, formatted to be appended to an error message.
    fn recent_logs(&self) -> String {
        let tail: Vec<&str> = self
            .logs
            .iter()
            .rev()
            .take(10)
            .rev()
            .map(String::as_str)
            .collect();
        if tail.is_empty() {
            String::new()
        } else {
            format!("\npage log (most recent last):\n  {}", tail.join("\n  "))
        }
    }

    /// Whether Chromium exited, and the end of its stderr, to be appended to an error message.
    fn exit_report(&mut self) -> String {
        // Give a dying browser a moment to be reaped, so its status can be reported.
        let mut status = None;
        for _ in 0..20 {
            status = self.child.try_wait().ok().flatten();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let state = match status {
            Some(status) => format!(" (Chromium exited: {status})"),
            None => " (Chromium is still running)".to_owned(),
        };
        let stderr = std::fs::read_to_string(self.temp_dir.join("stderr.log")).unwrap_or_default();
        // Chromium complains at length about the missing D-Bus, and Debian's wrapper script
        // about its /dev/shm check: neither is ever the problem.
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|line| !line.contains("dbus") && !line.contains("unexpected operator"))
            .collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n  ");
        if tail.is_empty() {
            state
        } else {
            format!("{state}; end of its stderr:\n  {tail}")
        }
    }
}

impl Drop for Browser {
    /// Asks Chromium to close, kills it if it has not exited within a few seconds, reaps it and
    /// removes the temporary profile.
    fn drop(&mut self) {
        if let Some(mut pipe) = self.to_browser.take() {
            let close = json!({"id": self.next_id, "method": "Browser.close"});
            let _ = pipe.write_all(format!("{close}\0").as_bytes());
            // Dropping the pipe closes it, which also makes Chromium shut down.
        }
        let deadline = Instant::now() + CLOSE_GRACE;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Helper processes may still be writing to the profile for a moment.
        for _ in 0..10 {
            if std::fs::remove_dir_all(&self.temp_dir).is_ok() || !self.temp_dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The reader thread: parses NUL-terminated JSON messages from Chromium and sends them on,
/// until the pipe closes (which disconnects the channel) or the receiver is gone.
fn read_messages(pipe: File, sender: mpsc::Sender<Result<Value, String>>) {
    let mut reader = BufReader::with_capacity(1 << 16, pipe);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(0, &mut buffer) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = sender.send(Err(format!("cannot read from Chromium: {e}")));
                return;
            }
        }
        if buffer.last() == Some(&0) {
            buffer.pop();
        }
        let message = serde_json::from_slice(&buffer).map_err(|e| {
            let text = String::from_utf8_lossy(&buffer[..buffer.len().min(200)]).into_owned();
            format!("malformed message from Chromium ({e}): {text}")
        });
        if sender.send(message).is_err() {
            return;
        }
    }
}

/// A short text for a `Runtime.RemoteObject` (a console argument).
fn remote_object_text(object: &Value) -> String {
    match (&object["value"], object["description"].as_str()) {
        (Value::String(text), _) => text.clone(),
        (Value::Null, Some(description)) => description.to_owned(),
        (Value::Null, None) => object["type"].as_str().unwrap_or("?").to_owned(),
        (value, _) => value.to_string(),
    }
}

/// A pipe whose two ends are close-on-exec and numbered 10 or above (so that neither is 3
/// or 4, which the child's `dup2` calls overwrite): `(read end, write end)`.
fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    let ends = unsafe { [OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])] };
    let [read, write] = ends.map(|fd| {
        // SAFETY: F_DUPFD_CLOEXEC duplicates an open fd; the result is checked below.
        let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
        if high == -1 {
            Err(format!("fcntl: {}", std::io::Error::last_os_error()))
        } else {
            // SAFETY: `high` is a freshly duplicated open fd owned by nobody else.
            Ok(unsafe { OwnedFd::from_raw_fd(high) })
        }
    });
    Ok((read?, write?))
}

/// Creates a fresh, empty directory under the system temporary directory.
fn fresh_temp_dir() -> Result<PathBuf, String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!(
        "flow-cdp-{}-{}-{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// Decodes standard base64 (with or without `=` padding; ASCII whitespace is skipped).
fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut count) = (0u32, 0u32);
    let mut padding = 0;
    for (position, byte) in text.bytes().enumerate() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => {
                padding += 1;
                continue;
            }
            b if b.is_ascii_whitespace() => continue,
            _ => return Err(format!("invalid base64 byte {byte:#04x} at {position}")),
        };
        if padding > 0 {
            return Err(format!("base64 data after padding at {position}"));
        }
        bits = (bits << 6) | u32::from(value);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    if count >= 6 || padding > 2 {
        return Err("truncated base64 data".to_owned());
    }
    Ok(out)
}

/// Unit tests of the pieces that need no browser.
#[cfg(test)]
mod tests {
    use super::base64_decode;

    /// The decoder against known encodings, with and without padding, and bad input.
    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(base64_decode("").as_deref(), Ok(&b""[..]));
        assert_eq!(base64_decode("Zg==").as_deref(), Ok(&b"f"[..]));
        assert_eq!(base64_decode("Zm8=").as_deref(), Ok(&b"fo"[..]));
        assert_eq!(base64_decode("Zm9v").as_deref(), Ok(&b"foo"[..]));
        assert_eq!(base64_decode("Zm9vYg").as_deref(), Ok(&b"foob"[..]));
        assert_eq!(base64_decode("Zm9v\nYmFy").as_deref(), Ok(&b"foobar"[..]));
        assert_eq!(base64_decode("+/8=").as_deref(), Ok(&[0xfb, 0xff][..]));
        assert!(base64_decode("Zm9v!").is_err());
        assert!(base64_decode("Zg==Zg").is_err());
        assert!(base64_decode("Z").is_err());
    }
}
