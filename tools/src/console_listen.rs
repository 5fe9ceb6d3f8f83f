//! `barebench qemu --console-listen HOST:PORT`: the emulated board's serial console served on a
//! TCP port as raw bytes, the way ser2net serves a USB-UART in raw mode and labgrid's
//! `NetworkSerialPort` with `protocol: raw` reads it (docs/farm.md). Output only: the kernel
//! reads no console input, so what a client sends is never read. One client at a time: a new connection replaces the previous one.
//! Whatever the board prints while no client is connected is kept (up to [`MAX_PENDING_BYTES`])
//! and sent to the next client first, so a client that connects just after power-on misses
//! nothing. When the board has stopped, the connection stays open until the client closes it
//! (at most [`ConsoleListener::finish`]'s `linger`), as ser2net's stays open when a board is
//! switched off: a client never loses the last bytes to an end of file it did not ask for
//! (pyserial's `socket://` read drops what it holds when it meets one).
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::thread;
use std::time::{Duration, Instant};

/// Console bytes kept for a client that has not connected yet (about 90 s of 115200 baud output
/// over one hundred times; a benchmark log is a few hundred KiB).
pub const MAX_PENDING_BYTES: usize = 16 << 20;
/// How long a write to a client may block before the client counts as gone.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often [`ConsoleListener::finish`] looks for a client.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// The listening console port and its current client.
#[derive(Debug)]
pub struct ConsoleListener {
    listener: TcpListener,
    client: Option<TcpStream>,
    pending: Vec<u8>,
    /// Bytes dropped because no client took them and the pending buffer was full.
    pub dropped_bytes: u64,
}

impl ConsoleListener {
    /// Listens on `address` (e.g. `127.0.0.1:5001`).
    pub fn bind(address: impl ToSocketAddrs) -> io::Result<ConsoleListener> {
        let listener = TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        Ok(ConsoleListener { listener, client: None, pending: Vec::new(), dropped_bytes: 0 })
    }

    /// The address actually bound (port 0 picks a free one).
    pub fn local_address(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Takes a waiting connection, if any (it replaces the current client), and sends it what
    /// is pending.
    fn accept_waiting(&mut self) {
        while let Ok((stream, _)) = self.listener.accept() {
            let ready = stream
                .set_nonblocking(false)
                .and_then(|_| stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT)))
                .and_then(|_| stream.set_nodelay(true));
            if ready.is_ok() {
                self.client = Some(stream);
            }
        }
        if self.pending.is_empty() {
            return;
        }
        if let Some(client) = &mut self.client {
            if client.write_all(&self.pending).is_ok() {
                self.pending.clear();
            } else {
                self.client = None;
            }
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_PENDING_BYTES.saturating_sub(self.pending.len());
        let kept = bytes.len().min(room);
        self.pending.extend_from_slice(&bytes[..kept]);
        self.dropped_bytes += (bytes.len() - kept) as u64;
    }

    /// After the board's output has ended for good: gives a client up to `wait` to connect and
    /// take what is pending, then keeps the connection open until the client closes it, at most
    /// `linger` longer, and closes it.
    pub fn finish(&mut self, wait: Duration, linger: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            self.accept_waiting();
            if self.pending.is_empty() || Instant::now() >= deadline {
                break;
            }
            thread::sleep(ACCEPT_POLL);
        }
        if let Some(mut client) = self.client.take() {
            let linger_end = Instant::now() + linger;
            let mut discard = [0u8; 256];
            while let Some(left) =
                linger_end.checked_duration_since(Instant::now()).filter(|left| !left.is_zero())
            {
                if client.set_read_timeout(Some(left)).is_err() {
                    break;
                }
                match io::Read::read(&mut client, &mut discard) {
                    // What the client sends is not console input: the kernel reads none.
                    Ok(count) if count > 0 => continue,
                    _ => break,
                }
            }
            let _ = client.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Write for ConsoleListener {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.accept_waiting();
        if !self.pending.is_empty() {
            // Still no client to take the earlier bytes: these wait behind them.
            self.keep(bytes);
            return Ok(bytes.len());
        }
        match &mut self.client {
            Some(client) => {
                if client.write_all(bytes).is_err() {
                    self.client = None;
                    self.keep(bytes);
                }
            }
            None => self.keep(bytes),
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(client) = &mut self.client {
            if client.flush().is_err() {
                self.client = None;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn read_all(mut stream: TcpStream) -> Vec<u8> {
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut bytes = Vec::new();
        let _ = stream.read_to_end(&mut bytes);
        bytes
    }

    #[test]
    fn a_client_that_connects_late_gets_everything_from_the_start() {
        let mut console = ConsoleListener::bind("127.0.0.1:0").unwrap();
        let address = console.local_address().unwrap();
        console.write_all(b"barebench 0.1.0\r\n").unwrap();
        console.write_all(b"board      Raspberry Pi 3 Model B\r\n").unwrap();
        let client = TcpStream::connect(address).unwrap();
        console.write_all(b"==== end ====\r\n").unwrap();
        console.finish(Duration::from_secs(2), Duration::ZERO);
        assert_eq!(
            read_all(client),
            b"barebench 0.1.0\r\nboard      Raspberry Pi 3 Model B\r\n==== end ====\r\n"
        );
        assert_eq!(console.dropped_bytes, 0);
    }

    #[test]
    fn finish_waits_for_a_client_to_take_what_is_pending() {
        let mut console = ConsoleListener::bind("127.0.0.1:0").unwrap();
        let address = console.local_address().unwrap();
        console.write_all(b"all of it").unwrap();
        let reader = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            read_all(TcpStream::connect(address).unwrap())
        });
        console.finish(Duration::from_secs(5), Duration::ZERO);
        assert_eq!(reader.join().unwrap(), b"all of it");
    }

    #[test]
    fn a_new_connection_replaces_the_old_one_and_nothing_pending_is_lost() {
        let mut console = ConsoleListener::bind("127.0.0.1:0").unwrap();
        let address = console.local_address().unwrap();
        let first = TcpStream::connect(address).unwrap();
        console.write_all(b"one ").unwrap();
        let second = TcpStream::connect(address).unwrap();
        // Let the kernel queue the second connection before the next write looks for it.
        thread::sleep(Duration::from_millis(50));
        console.write_all(b"two").unwrap();
        console.finish(Duration::from_secs(1), Duration::ZERO);
        assert_eq!(read_all(first), b"one ");
        assert_eq!(read_all(second), b"two");
    }

    #[test]
    fn the_connection_stays_open_after_the_end_until_the_client_closes_it() {
        let mut console = ConsoleListener::bind("127.0.0.1:0").unwrap();
        let address = console.local_address().unwrap();
        let mut client = TcpStream::connect(address).unwrap();
        console.write_all(b"last line").unwrap();
        let closer = thread::spawn(move || {
            let mut received = [0u8; 9];
            client.read_exact(&mut received).unwrap();
            thread::sleep(Duration::from_millis(300));
            received
        });
        let started = Instant::now();
        console.finish(Duration::from_secs(1), Duration::from_secs(20));
        assert_eq!(&closer.join().unwrap(), b"last line");
        let lingered = started.elapsed();
        assert!(lingered >= Duration::from_millis(250) && lingered < Duration::from_secs(10), "{lingered:?}");
    }

    #[test]
    fn output_beyond_the_pending_limit_is_counted_as_dropped() {
        let mut console = ConsoleListener::bind("127.0.0.1:0").unwrap();
        console.write_all(&vec![b'x'; MAX_PENDING_BYTES]).unwrap();
        console.write_all(b"more").unwrap();
        assert_eq!(console.dropped_bytes, 4);
    }
}
