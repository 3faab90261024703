//! The states of one CM connection and what moves it between them: the
//! table of IBTA vol. 1 12.9.6 (the connection state diagram) as Linux
//! `ib_cm` follows it over RoCE. Pure: [`step`] names the next state and
//! the actions; [`crate::cm::Cm`] performs them.
//!
//! Linux departs from the diagram in two places, and so does this table:
//! - a REQ or REP handed to the consumer is MRA'd *with the delay flag*:
//!   nothing is sent, the connection waits in `MraReqSent` / `MraRepSent`,
//!   and only a duplicate of the message gets an MRA (rdmacm.md 1.12);
//! - a DREQ in `RepSent` (the RTU was lost and the peer already
//!   disconnects) ends the connection as in `Established`.

/// Where a connection is (Linux `enum ib_cm_state`, less LISTEN, which is a
/// listener's and not a connection's, and the transient REQ_RCVD/REP_RCVD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Active: REQ sent, waiting for REP, REJ or MRA.
    ReqSent,
    /// Active: the peer MRA'd the REQ; waiting longer.
    MraReqRcvd,
    /// Passive: REQ handed to the consumer (delayed MRA); waiting for accept or reject.
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer MRA'd the REP; waiting longer.
    MraRepRcvd,
    /// Active: REP handed to the consumer (delayed MRA); waiting for it to establish or reject.
    MraRepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// DREQ received and handed to the consumer; waiting for it to send the DREP.
    DreqRcvd,
    /// Disconnected; late DREQs are answered until the timer ends.
    Timewait,
    /// Gone (the connection is removed).
    Idle,
}

/// What happened to a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Input {
    /// The consumer connects (a new active connection).
    Connect,
    /// A REQ for a new passive connection.
    Req,
    /// A REQ again, for this connection.
    ReqDup,
    /// A REP.
    Rep,
    /// A REP again, after the first was handed on.
    RepDup,
    /// An RTU.
    Rtu,
    /// An MRA of this side's REQ.
    MraOfReq,
    /// An MRA of this side's REP.
    MraOfRep,
    /// A REJ.
    Rej,
    /// A DREQ naming this side's QP.
    Dreq,
    /// A DREP.
    Drep,
    /// The consumer accepts (passive).
    Accept,
    /// The consumer rejects.
    Reject,
    /// The consumer establishes: the active side's RTU, or the passive side's
    /// communication-established (data arrived before the RTU).
    Establish,
    /// The consumer disconnects: DREQ, or the DREP to a DREQ received.
    Disconnect,
    /// The retransmission timer fired with retries left.
    Retry,
    /// The timer fired with none left (or the timewait ended).
    Expired,
}

/// What a connection does on a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Sends a REQ and arms its retransmission.
    SendReq,
    /// Sends a REP and arms its retransmission.
    SendRep,
    /// Sends an RTU (first or again).
    SendRtu,
    /// Sends an MRA of the peer's REQ.
    SendMraOfReq,
    /// Sends an MRA of the peer's REP.
    SendMraOfRep,
    /// Sends a REJ of the peer's REQ (reason from the consumer).
    SendRejOfReq,
    /// Sends a REJ of the peer's REP (reason from the consumer).
    SendRejOfRep,
    /// Sends a DREQ and arms its retransmission.
    SendDreq,
    /// Sends a DREP (first or again).
    SendDrep,
    /// Sends the last retransmittable message again and re-arms.
    Resend,
    /// Waits longer, as the peer's MRA asked.
    ArmForMra,
    /// Stops the retransmission timer.
    Disarm,
    /// Starts the timewait timer.
    ArmTimewait,
    /// Tells the consumer: a REQ arrived.
    EventReq,
    /// Tells the consumer: a REP arrived.
    EventRep,
    /// Tells the consumer: established.
    EventEstablished,
    /// Tells the consumer: rejected.
    EventRejected,
    /// Tells the consumer: unreachable (REQ or REP retries exhausted).
    EventUnreachable,
    /// Tells the consumer: the peer disconnects.
    EventDreq,
    /// Tells the consumer: the DREP arrived.
    EventDrep,
    /// Tells the consumer: the DREQ went unanswered.
    EventDisconnectTimeout,
    /// Tells the consumer: the timewait is over.
    EventTimewaitExit,
}

use Action::*;
use Input::*;
use State::*;

/// Every transition: (from, input, to, actions). A pair not listed leaves
/// the connection as it is; the message is dropped and counted.
pub const TABLE: &[(State, Input, State, &[Action])] = &[
    // Active connection establishment.
    (Idle, Connect, ReqSent, &[SendReq]),
    (ReqSent, MraOfReq, MraReqRcvd, &[ArmForMra]),
    (ReqSent, Rep, MraRepSent, &[Disarm, EventRep]),
    (MraReqRcvd, Rep, MraRepSent, &[Disarm, EventRep]),
    (ReqSent, Rej, Idle, &[Disarm, EventRejected]),
    (MraReqRcvd, Rej, Idle, &[Disarm, EventRejected]),
    (ReqSent, Retry, ReqSent, &[Resend]),
    (MraReqRcvd, Retry, MraReqRcvd, &[Resend]),
    (ReqSent, Expired, Idle, &[EventUnreachable]),
    (MraReqRcvd, Expired, Idle, &[EventUnreachable]),
    (MraRepSent, RepDup, MraRepSent, &[SendMraOfRep]),
    (MraRepSent, Establish, Established, &[SendRtu]),
    (MraRepSent, Reject, Idle, &[SendRejOfRep]),
    (MraRepSent, Rej, Idle, &[EventRejected]),
    (Established, RepDup, Established, &[SendRtu]),
    // Passive connection establishment.
    (Idle, Req, MraReqSent, &[EventReq]),
    (MraReqSent, ReqDup, MraReqSent, &[SendMraOfReq]),
    (MraReqSent, Accept, RepSent, &[SendRep]),
    (MraReqSent, Reject, Idle, &[SendRejOfReq]),
    (MraReqSent, Rej, Idle, &[EventRejected]),
    (RepSent, MraOfRep, MraRepRcvd, &[ArmForMra]),
    (RepSent, Rtu, Established, &[Disarm, EventEstablished]),
    (MraRepRcvd, Rtu, Established, &[Disarm, EventEstablished]),
    (RepSent, Establish, Established, &[Disarm, EventEstablished]),
    (MraRepRcvd, Establish, Established, &[Disarm, EventEstablished]),
    (RepSent, Rej, Idle, &[Disarm, EventRejected]),
    (MraRepRcvd, Rej, Idle, &[Disarm, EventRejected]),
    (RepSent, Retry, RepSent, &[Resend]),
    (MraRepRcvd, Retry, MraRepRcvd, &[Resend]),
    (RepSent, Expired, Idle, &[EventUnreachable]),
    (MraRepRcvd, Expired, Idle, &[EventUnreachable]),
    // Disconnection.
    (Established, Disconnect, DreqSent, &[SendDreq]),
    (Established, Dreq, DreqRcvd, &[EventDreq]),
    (RepSent, Dreq, DreqRcvd, &[Disarm, EventDreq]),
    (MraRepRcvd, Dreq, DreqRcvd, &[Disarm, EventDreq]),
    // Crossing DREQs: each side answers the other's (Linux cm_dreq_handler).
    (DreqSent, Dreq, DreqRcvd, &[Disarm, EventDreq]),
    (DreqSent, Drep, Timewait, &[Disarm, EventDrep, ArmTimewait]),
    (DreqSent, Retry, DreqSent, &[Resend]),
    (DreqSent, Expired, Timewait, &[EventDisconnectTimeout, ArmTimewait]),
    (DreqRcvd, Disconnect, Timewait, &[SendDrep, ArmTimewait]),
    (Timewait, Dreq, Timewait, &[SendDrep]),
    (Timewait, Expired, Idle, &[EventTimewaitExit]),
];

/// The next state and the actions for `input` in `state`, or `None` when
/// the table has no such row (the input is ignored).
pub fn step(state: State, input: Input) -> Option<(State, &'static [Action])> {
    TABLE.iter().find(|(s, i, _, _)| *s == state && *i == input).map(|(_, _, to, a)| (*to, *a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_a_function() {
        for (k, (s, i, _, _)) in TABLE.iter().enumerate() {
            assert!(TABLE[k + 1..].iter().all(|(s2, i2, _, _)| (s2, i2) != (s, i)), "two rows for ({s:?}, {i:?})");
        }
    }

    /// Every row that tells the consumer something other than a REQ, REP or
    /// DREQ ends the retransmission first, and every row that ends in Idle
    /// leaves no timer armed.
    #[test]
    fn rows_keep_the_timer_consistent() {
        for (s, i, to, actions) in TABLE {
            if *to == Idle {
                assert!(
                    !actions
                        .iter()
                        .any(|a| matches!(a, SendReq | SendRep | SendDreq | Resend | ArmForMra | ArmTimewait)),
                    "({s:?}, {i:?}) ends in Idle with a timer"
                );
            }
            let resends = matches!(s, ReqSent | MraReqRcvd | RepSent | MraRepRcvd | DreqSent);
            let leaves = *to != *s && !matches!((s, to), (ReqSent, MraReqRcvd) | (RepSent, MraRepRcvd));
            if resends && leaves && *i != Expired {
                assert!(actions.contains(&Disarm), "({s:?}, {i:?}) leaves a retransmitting state without Disarm");
            }
        }
    }

    #[test]
    fn a_whole_connection_walks_the_table() {
        let walk = |start: State, inputs: &[Input]| {
            inputs.iter().fold(start, |s, i| step(s, *i).unwrap_or_else(|| panic!("no row ({s:?}, {i:?})")).0)
        };
        assert_eq!(walk(Idle, &[Connect, Rep, Establish, Disconnect, Drep, Expired]), Idle);
        assert_eq!(walk(Idle, &[Req, Accept, Rtu, Dreq, Disconnect, Expired]), Idle);
        assert_eq!(walk(Idle, &[Connect, Retry, MraOfReq, Retry, Rep, RepDup, Establish, RepDup]), Established);
        assert!(step(Established, Rtu).is_none(), "a duplicate RTU changes nothing");
        assert!(step(DreqRcvd, Dreq).is_none(), "a duplicate DREQ before the DREP is dropped");
    }
}
