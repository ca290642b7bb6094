//! Untrusted Raft bytes, on both sides of a voter's connection (`strom_raft::wire`,
//! `strom_raft::transport`):
//!
//! - the first byte's low bit 0: the rest is the stream a voter's own listener reads
//!   (`transport::read_frame` with a frame bound, `wire::parse_request_frame`,
//!   `wire::decode_request`), frame after frame until the first the listener would refuse;
//! - low bit 1: the stream a voter's client reads as answers (`read_frame`,
//!   `wire::parse_response_frame`, `wire::decode_response`).
//!
//! Each decoded value is encoded again (the size first, as the client does before sending) and
//! decoded from its own encoding, which must succeed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strom_raft::transport::read_frame;
use strom_raft::wire;

/// The frame bound the fuzzed reader uses: small enough to reach, as the 100 MiB default is
/// not within a fuzz input.
const MAX_FRAME: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut stream)) = data.split_first() else {
        return;
    };
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let rt = RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
    });
    rt.block_on(async {
        loop {
            let payload = match read_frame(&mut stream, MAX_FRAME).await {
                Ok(Some(p)) => p,
                // End of input, or a frame the reader refuses: the connection closes.
                Ok(None) | Err(_) => return,
            };
            let ok = if mode & 1 == 0 {
                wire::parse_request_frame(payload)
                    .ok()
                    .and_then(|(_, body)| wire::decode_request(&body).ok())
                    .map(|req| {
                        let again = wire::encode_body(&req, usize::MAX).expect("re-encode");
                        wire::decode_request(&again).expect("decode own encoding");
                    })
                    .is_some()
            } else {
                wire::parse_response_frame(payload)
                    .ok()
                    .and_then(|(_, body)| wire::decode_response(&body).ok())
                    .map(|resp| {
                        let again = wire::encode_body(&resp, usize::MAX).expect("re-encode");
                        wire::decode_response(&again).expect("decode own encoding");
                    })
                    .is_some()
            };
            if !ok {
                return;
            }
        }
    });
});
