//! Where an rsocket is in its life: rsockets' `enum rs_state` as a Rust
//! enum, its moves as one table ([`State::on`]). rsockets orders its states
//! passive, connecting, connected, disconnected; "connected" keeps the two
//! directions apart (`rs_readable`, `rs_writable`), each closed by a local
//! `rshutdown` or the peer's SHUTDOWN / DISCONNECT control message.

use super::wire::Ctrl;

/// An rsocket's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Fresh (`rs_init`).
    Idle,
    /// `rbind` done (`rs_bound`).
    Bound,
    /// `rlisten` done (`rs_listening`).
    Listening,
    /// The REQ is out; the REP or a reject comes next (`rs_connecting`).
    Connecting,
    /// Connected (`rs_connected`), with the directions still open.
    Connected {
        /// Data may still come (`rs_readable`).
        rd: bool,
        /// Data may still be sent (`rs_writable`).
        wr: bool,
    },
    /// The connect failed; `SO_ERROR` says why (`rs_connect_error`).
    ConnectFailed,
    /// Over, cleanly (`rs_disconnected`): what was received can still be read.
    Disconnected,
    /// Over after a transport or protocol error (`rs_error`).
    Failed,
}

/// What moves an rsocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// `rbind`.
    Bind,
    /// `rlisten`.
    Listen,
    /// `rconnect` sent the REQ.
    ConnectStarted,
    /// ESTABLISHED (the REP came, or the listener's accept completed).
    Established,
    /// The connect was rejected or timed out.
    ConnectRefused,
    /// `rshutdown(SHUT_RD)`.
    ShutdownRd,
    /// `rshutdown(SHUT_WR)`.
    ShutdownWr,
    /// `rshutdown(SHUT_RDWR)`.
    ShutdownRdWr,
    /// The peer's SHUTDOWN: it sends no more.
    PeerShutdown,
    /// The peer's DISCONNECT.
    PeerDisconnect,
    /// This side's DISCONNECT completed.
    DisconnectSent,
    /// The CM reported DISCONNECTED (the peer's DREQ).
    CmDisconnected,
    /// A send completed in error (retries exhausted, access error).
    TransportError,
    /// The peer sent what rsockets never sends.
    ProtocolError,
}

impl State {
    /// The state `input` moves to, or `None` when it does not apply here
    /// (the caller's error). The whole table:
    ///
    /// | from | input | to |
    /// |---|---|---|
    /// | Idle | Bind | Bound |
    /// | Idle, Bound, Listening | Listen | Listening |
    /// | Idle, Bound | ConnectStarted | Connecting |
    /// | Connecting | Established | Connected (rd, wr) |
    /// | Connecting | ConnectRefused, TransportError, ProtocolError | ConnectFailed |
    /// | Connected | ShutdownRd / ShutdownWr / ShutdownRdWr | that direction (or both) closed |
    /// | Connected, writable | PeerShutdown | not readable |
    /// | Connected, not writable | PeerShutdown | Disconnected |
    /// | Connected | PeerDisconnect, DisconnectSent, CmDisconnected | Disconnected |
    /// | Connected | TransportError, ProtocolError | Failed |
    /// | Disconnected, Failed, ConnectFailed | any peer or transport input | unchanged |
    pub fn on(self, input: Input) -> Option<State> {
        use Input as I;
        use State as S;
        Some(match (self, input) {
            (S::Idle, I::Bind) => S::Bound,
            (S::Idle | S::Bound | S::Listening, I::Listen) => S::Listening,
            (S::Idle | S::Bound, I::ConnectStarted) => S::Connecting,
            (S::Connecting, I::Established) => S::Connected { rd: true, wr: true },
            (S::Connecting, I::ConnectRefused | I::TransportError | I::ProtocolError) => S::ConnectFailed,
            (S::Connected { wr, .. }, I::ShutdownRd) => S::Connected { rd: false, wr },
            (S::Connected { rd, .. }, I::ShutdownWr) => S::Connected { rd, wr: false },
            (S::Connected { .. }, I::ShutdownRdWr) => S::Connected { rd: false, wr: false },
            (S::Connected { wr: true, .. }, I::PeerShutdown) => S::Connected { rd: false, wr: true },
            (S::Connected { wr: false, .. }, I::PeerShutdown) => S::Disconnected,
            (S::Connected { .. }, I::PeerDisconnect | I::DisconnectSent | I::CmDisconnected) => S::Disconnected,
            (S::Connected { .. }, I::TransportError | I::ProtocolError) => S::Failed,
            (
                s @ (S::Disconnected | S::Failed | S::ConnectFailed),
                I::PeerShutdown
                | I::PeerDisconnect
                | I::DisconnectSent
                | I::CmDisconnected
                | I::TransportError
                | I::ProtocolError,
            ) => s,
            _ => return None,
        })
    }

    /// `rs_connected`.
    pub fn connected(self) -> bool {
        matches!(self, State::Connected { .. })
    }

    /// `rs_readable`.
    pub fn readable(self) -> bool {
        matches!(self, State::Connected { rd: true, .. })
    }

    /// `rs_writable`.
    pub fn writable(self) -> bool {
        matches!(self, State::Connected { wr: true, .. })
    }

    /// Whether the socket ever had a connection (data may wait to be read,
    /// the queues exist).
    pub fn has_connection(self) -> bool {
        matches!(self, State::Connected { .. } | State::Disconnected | State::Failed)
    }

    /// Whether `SOL_RDMA` options may still change (before `rs_opening`).
    pub fn before_connect(self) -> bool {
        matches!(self, State::Idle | State::Bound | State::Listening)
    }
}

/// What `rshutdown(how)` does to a connected socket: its input and the
/// control message to send, if any (rsockets' rule: SHUT_RDWR, or closing
/// the last open direction, sends DISCONNECT; closing writing while reading
/// goes on sends SHUTDOWN; closing reading while writing goes on sends nothing).
pub fn shutdown_plan(state: State, how: i32) -> Option<(Input, Option<Ctrl>)> {
    let State::Connected { rd, wr } = state else { return None };
    Some(match how {
        libc::SHUT_RDWR => (Input::ShutdownRdWr, Some(Ctrl::Disconnect)),
        libc::SHUT_WR => (Input::ShutdownWr, Some(if rd { Ctrl::Shutdown } else { Ctrl::Disconnect })),
        libc::SHUT_RD => (Input::ShutdownRd, (!wr).then_some(Ctrl::Disconnect)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: State = State::Connected { rd: true, wr: true };

    #[test]
    fn a_client_goes_idle_connecting_connected() {
        let s = State::Idle.on(Input::ConnectStarted).unwrap();
        assert_eq!(s, State::Connecting);
        assert_eq!(s.on(Input::Established), Some(OPEN));
        assert_eq!(s.on(Input::ConnectRefused), Some(State::ConnectFailed));
        assert_eq!(State::Bound.on(Input::ConnectStarted), Some(State::Connecting));
        assert_eq!(State::Listening.on(Input::ConnectStarted), None, "a listener does not connect");
        assert_eq!(OPEN.on(Input::ConnectStarted), None, "connected already");
    }

    #[test]
    fn a_server_binds_and_listens_once_or_more() {
        assert_eq!(State::Idle.on(Input::Bind), Some(State::Bound));
        assert_eq!(State::Bound.on(Input::Bind), None);
        assert_eq!(State::Bound.on(Input::Listen), Some(State::Listening));
        assert_eq!(State::Listening.on(Input::Listen), Some(State::Listening));
        assert_eq!(OPEN.on(Input::Listen), None);
    }

    #[test]
    fn directions_close_one_at_a_time() {
        let s = OPEN.on(Input::ShutdownWr).unwrap();
        assert!(s.readable() && !s.writable() && s.connected());
        assert_eq!(s.on(Input::PeerShutdown), Some(State::Disconnected), "both closed");
        let s = OPEN.on(Input::PeerShutdown).unwrap();
        assert!(!s.readable() && s.writable());
        assert_eq!(OPEN.on(Input::ShutdownRdWr), Some(State::Connected { rd: false, wr: false }));
        assert_eq!(State::Connected { rd: false, wr: false }.on(Input::DisconnectSent), Some(State::Disconnected));
    }

    #[test]
    fn the_end_is_sticky() {
        for end in [State::Disconnected, State::Failed, State::ConnectFailed] {
            for i in [Input::PeerDisconnect, Input::CmDisconnected, Input::TransportError, Input::ProtocolError] {
                assert_eq!(end.on(i), Some(end));
            }
            assert_eq!(end.on(Input::Established), None);
            assert_eq!(end.on(Input::ShutdownRdWr), None);
        }
        assert_eq!(OPEN.on(Input::TransportError), Some(State::Failed));
        assert_eq!(OPEN.on(Input::ProtocolError), Some(State::Failed));
        assert_eq!(OPEN.on(Input::CmDisconnected), Some(State::Disconnected));
    }

    #[test]
    fn shutdown_sends_what_rsockets_sends() {
        assert_eq!(shutdown_plan(OPEN, libc::SHUT_RDWR), Some((Input::ShutdownRdWr, Some(Ctrl::Disconnect))));
        assert_eq!(shutdown_plan(OPEN, libc::SHUT_WR), Some((Input::ShutdownWr, Some(Ctrl::Shutdown))));
        assert_eq!(shutdown_plan(OPEN, libc::SHUT_RD), Some((Input::ShutdownRd, None)));
        let read_closed = State::Connected { rd: false, wr: true };
        assert_eq!(shutdown_plan(read_closed, libc::SHUT_WR), Some((Input::ShutdownWr, Some(Ctrl::Disconnect))));
        let write_closed = State::Connected { rd: true, wr: false };
        assert_eq!(shutdown_plan(write_closed, libc::SHUT_RD), Some((Input::ShutdownRd, Some(Ctrl::Disconnect))));
        assert_eq!(shutdown_plan(OPEN, 7), None);
        assert_eq!(shutdown_plan(State::Disconnected, libc::SHUT_RDWR), None);
    }
}
