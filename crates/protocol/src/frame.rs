//! Kafka framing: every request and response is a 4-byte big-endian size followed by that many
//! bytes. Parsing is split in two steps (`check`, then take), so "not enough bytes yet" is an
//! ordinary answer rather than an error.

use thiserror::Error;

/// Kafka's `socket.request.max.bytes` default (100 MiB).
pub const DEFAULT_MAX_REQUEST_SIZE: usize = 100 * 1024 * 1024;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame size {size} exceeds the limit of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("negative frame size {0}")]
    Negative(i32),
}

/// Looks at the start of `buf`: `Ok(Some(n))` when a whole frame of `n` payload bytes (after the
/// 4-byte size) is present, `Ok(None)` when more bytes are needed.
pub fn check(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 {
        return Err(FrameError::Negative(size));
    }
    let size = size as usize;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    if buf.len() < 4 + size {
        return Ok(None);
    }
    Ok(Some(size))
}

/// The first fields of every request header, readable whatever the header version:
/// api key, api version, correlation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

/// Reads the header prefix from a frame payload (after the size), if it is long enough. Used to
/// answer a request whose API or version we cannot decode.
pub fn peek_header(payload: &[u8]) -> Option<HeaderPrefix> {
    if payload.len() < 8 {
        return None;
    }
    Some(HeaderPrefix {
        api_key: i16::from_be_bytes([payload[0], payload[1]]),
        api_version: i16::from_be_bytes([payload[2], payload[3]]),
        correlation_id: i32::from_be_bytes([payload[4], payload[5], payload[6], payload[7]]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_then_complete() {
        assert_eq!(check(&[0, 0], 100), Ok(None));
        assert_eq!(check(&[0, 0, 0, 3, 1, 2], 100), Ok(None));
        assert_eq!(check(&[0, 0, 0, 3, 1, 2, 3], 100), Ok(Some(3)));
    }

    #[test]
    fn rejects_huge_and_negative() {
        assert_eq!(
            check(&[0x7f, 0xff, 0xff, 0xff], 100),
            Err(FrameError::TooLarge {
                size: i32::MAX as usize,
                max: 100
            })
        );
        assert_eq!(
            check(&[0xff, 0xff, 0xff, 0xff], 100),
            Err(FrameError::Negative(-1))
        );
    }

    #[test]
    fn peeks_header() {
        let p = [0, 18, 0, 3, 0, 0, 0, 7, 0];
        assert_eq!(
            peek_header(&p),
            Some(HeaderPrefix {
                api_key: 18,
                api_version: 3,
                correlation_id: 7
            })
        );
        assert_eq!(peek_header(&p[..5]), None);
    }
}
