//! The operator's commands beside the daemon: the start's check of every
//! store (`access`), one showtime's seat map (`inspect`), `once
//! --pushgateway` (`push`) and the demo with its private servers and
//! seatflow-style writes (`demo`); what they print on stdout (`stdout`: a
//! reader that goes away ends the output quietly).

pub mod access;
pub mod demo;
pub mod inspect;
pub mod push;
pub mod stdout;
