// The Spark binary frame (docs/protocol.md §2): a fixed 23-byte big-endian header
// followed by a UTF-8 JSON body that may be gzipped.
//
//   0  Magic      u16  0x5350 ("SP")
//   2  Version    u8   1
//   3  Command    u16
//   5  Flags      u16  bit0 = body is gzip
//   7  RequestID  u64  client's pairing number, echoed back (pushes carry 0)
//   15 SequenceID u32  request/response pairing; PUSH_ACK echoes the push's
//   19 BodyLength u32  bytes of body as sent (after compression)
//   23 Body
//
// Over WebSocket every binary message carries exactly one frame.

/** Size of the fixed frame header. */
export const HEADER_SIZE = 23;
/** "SP". */
export const MAGIC = 0x5350;
/** The only protocol version. */
export const VERSION = 1;
/** Flags bit 0: the body is gzip. */
export const FLAG_GZIP = 1;
/** Default limit of a whole frame, header included (the server's default). */
export const DEFAULT_MAX_FRAME_SIZE = 64 * 1024;
/** The smallest body worth trying to gzip. */
export const COMPRESS_THRESHOLD = 512;

const MAX_U64 = (1n << 64n) - 1n;

/** Why a frame or a stream of frames cannot be read; the connection must close. */
export type FrameErrorKind =
  | "bad_magic"
  | "bad_version"
  | "too_large"
  | "short"
  | "length_mismatch"
  | "bad_gzip"
  | "inflated_too_large"
  | "bad_field";

/** A frame that breaks the protocol: the connection carrying it must close. */
export class FrameError extends Error {
  readonly kind: FrameErrorKind;
  constructor(kind: FrameErrorKind, message: string) {
    super(`spark frame: ${message}`);
    this.name = "FrameError";
    this.kind = kind;
  }
}

/** A decoded frame header. */
export interface FrameHeader {
  command: number;
  flags: number;
  requestId: bigint;
  sequenceId: number;
  bodyLength: number;
}

/** A whole frame; body is as carried (still gzipped when flags say so) unless noted. */
export interface Frame {
  command: number;
  flags: number;
  requestId: bigint;
  sequenceId: number;
  body: Uint8Array;
}

/** The fields a caller sets when encoding; BodyLength comes from the body. */
export interface FrameFields {
  command: number;
  flags?: number;
  requestId?: bigint;
  sequenceId?: number;
}

function view(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

/**
 * Decodes and validates the header at the start of b (at least HEADER_SIZE
 * bytes). maxFrame limits header plus body. Throws a FrameError.
 */
export function parseHeader(b: Uint8Array, maxFrame: number = DEFAULT_MAX_FRAME_SIZE): FrameHeader {
  if (b.byteLength < HEADER_SIZE) {
    throw new FrameError("short", `header needs ${HEADER_SIZE} bytes, have ${b.byteLength}`);
  }
  const v = view(b);
  if (v.getUint16(0) !== MAGIC) throw new FrameError("bad_magic", "bad magic");
  if (v.getUint8(2) !== VERSION) throw new FrameError("bad_version", `unsupported version ${v.getUint8(2)}`);
  const h: FrameHeader = {
    command: v.getUint16(3),
    flags: v.getUint16(5),
    requestId: v.getBigUint64(7),
    sequenceId: v.getUint32(15),
    bodyLength: v.getUint32(19),
  };
  if (h.bodyLength + HEADER_SIZE > maxFrame) {
    throw new FrameError("too_large", `frame of ${h.bodyLength + HEADER_SIZE} bytes over the limit of ${maxFrame}`);
  }
  return h;
}

/**
 * Reads one frame from the start of a byte stream buffer, like the Go
 * codec's frame.Decode: null when buf does not hold a whole frame yet (wait
 * for more bytes); a FrameError as soon as the bytes present show the stream
 * is broken (bad magic or version even before the header is complete, a
 * length over the limit without waiting for the body). The body is not
 * inflated. `used` is the number of bytes the frame took.
 */
export function decodeFrame(
  buf: Uint8Array,
  maxFrame: number = DEFAULT_MAX_FRAME_SIZE,
): { frame: Frame; used: number } | null {
  if (buf.byteLength < HEADER_SIZE) {
    if (buf.byteLength >= 2 && view(buf).getUint16(0) !== MAGIC) throw new FrameError("bad_magic", "bad magic");
    if (buf.byteLength >= 3 && buf[2] !== VERSION) throw new FrameError("bad_version", `unsupported version ${buf[2]}`);
    return null;
  }
  const h = parseHeader(buf, maxFrame);
  const total = HEADER_SIZE + h.bodyLength;
  if (buf.byteLength < total) return null;
  return {
    frame: {
      command: h.command,
      flags: h.flags,
      requestId: h.requestId,
      sequenceId: h.sequenceId,
      body: buf.subarray(HEADER_SIZE, total),
    },
    used: total,
  };
}

/** Returns a new buffer holding the frame of f and body. */
export function encodeFrame(f: FrameFields, body: Uint8Array = new Uint8Array(0)): Uint8Array {
  const flags = f.flags ?? 0;
  const requestId = f.requestId ?? 0n;
  const sequenceId = f.sequenceId ?? 0;
  if (!Number.isInteger(f.command) || f.command < 0 || f.command > 0xffff) {
    throw new FrameError("bad_field", `command ${f.command} is not a u16`);
  }
  if (!Number.isInteger(flags) || flags < 0 || flags > 0xffff) throw new FrameError("bad_field", `flags ${flags} is not a u16`);
  if (requestId < 0n || requestId > MAX_U64) throw new FrameError("bad_field", `request id ${requestId} is not a u64`);
  if (!Number.isInteger(sequenceId) || sequenceId < 0 || sequenceId > 0xffffffff) {
    throw new FrameError("bad_field", `sequence id ${sequenceId} is not a u32`);
  }
  const out = new Uint8Array(HEADER_SIZE + body.byteLength);
  const v = view(out);
  v.setUint16(0, MAGIC);
  v.setUint8(2, VERSION);
  v.setUint16(3, f.command);
  v.setUint16(5, flags);
  v.setBigUint64(7, requestId);
  v.setUint32(15, sequenceId);
  v.setUint32(19, body.byteLength);
  out.set(body, HEADER_SIZE);
  return out;
}

async function pump(stream: ReadableWritablePair<Uint8Array, Uint8Array>, input: Uint8Array, limit: number): Promise<Uint8Array> {
  const writer = stream.writable.getWriter();
  // The reader reports the stream's failure; these promises would only
  // repeat it, so they must not surface as unhandled rejections.
  writer.write(input).catch(() => {});
  writer.close().catch(() => {});
  const reader = stream.readable.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      reader.cancel().catch(() => {});
      throw new FrameError("inflated_too_large", `inflated body over ${limit} bytes`);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return out;
}

/**
 * Inflates a gzip body with the platform's DecompressionStream, refusing
 * more than limit bytes so a small frame cannot expand into a memory bomb.
 */
export async function inflate(body: Uint8Array, limit: number): Promise<Uint8Array> {
  try {
    return await pump(new DecompressionStream("gzip") as ReadableWritablePair<Uint8Array, Uint8Array>, body, limit);
  } catch (e) {
    if (e instanceof FrameError) throw e;
    throw new FrameError("bad_gzip", `body flagged gzip does not inflate: ${(e as Error).message}`);
  }
}

/**
 * Gzips body with the platform's CompressionStream when it is at least
 * COMPRESS_THRESHOLD bytes and the result is smaller; gzipped says which.
 */
export async function compress(body: Uint8Array): Promise<{ body: Uint8Array; gzipped: boolean }> {
  if (body.byteLength < COMPRESS_THRESHOLD || typeof CompressionStream === "undefined") {
    return { body, gzipped: false };
  }
  const z = await pump(new CompressionStream("gzip") as ReadableWritablePair<Uint8Array, Uint8Array>, body, Number.MAX_SAFE_INTEGER);
  return z.byteLength < body.byteLength ? { body: z, gzipped: true } : { body, gzipped: false };
}

/** Limits of readMessage. */
export interface ReadLimits {
  /** Largest frame accepted, header included. */
  maxFrameSize: number;
  /** Largest body after inflating a gzip body. */
  maxInflated: number;
}

/**
 * Decodes one WebSocket binary message, which must be exactly one whole
 * frame, and inflates its body when the header's gzip flag is set. The
 * returned frame's flags no longer carry FLAG_GZIP.
 */
export async function readMessage(data: ArrayBuffer | Uint8Array, limits: ReadLimits): Promise<Frame> {
  const buf = data instanceof Uint8Array ? data : new Uint8Array(data);
  if (buf.byteLength < HEADER_SIZE) throw new FrameError("short", `message of ${buf.byteLength} bytes is shorter than a header`);
  const got = decodeFrame(buf, limits.maxFrameSize);
  if (got === null || got.used !== buf.byteLength) {
    throw new FrameError("length_mismatch", `message of ${buf.byteLength} bytes is not exactly one frame`);
  }
  const f = got.frame;
  if (f.flags & FLAG_GZIP) {
    return { ...f, flags: f.flags & ~FLAG_GZIP, body: await inflate(f.body, limits.maxInflated) };
  }
  return f;
}
