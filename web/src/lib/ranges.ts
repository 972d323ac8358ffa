/** HTTP ranges and cache validators: the pure part of downloading a model, unit-tested. */

export interface ContentRange {
  start: number;
  /** Inclusive, as in the header. */
  end: number;
  total: number;
}

/** Parses `Content-Range: bytes START-END/TOTAL`; null when absent or unusable. */
export function parseContentRange(header: string | null): ContentRange | null {
  const m = header?.match(/^bytes (\d+)-(\d+)\/(\d+)$/);
  if (!m) return null;
  const [start, end, total] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (end < start || end >= total) return null;
  return { start, end, total };
}

/** The `Range` header for bytes [start, end). */
export function rangeHeader(start: number, end: number): string {
  return `bytes=${start}-${end - 1}`;
}

/** Splits [start, total) into requests of at most `chunk` bytes. */
export function planChunks(start: number, total: number, chunk: number): Array<[number, number]> {
  if (chunk <= 0) throw new RangeError('chunk size must be positive');
  const out: Array<[number, number]> = [];
  for (let a = start; a < total; a += chunk) out.push([a, Math.min(a + chunk, total)]);
  return out;
}

/** What identifies one version of a remote file. */
export interface Validator {
  size: number;
  etag?: string;
  lastModified?: string;
}

/** Reads a validator from a HEAD (or full GET) response's headers; null without a size. */
export function validatorFrom(headers: Headers): Validator | null {
  const range = parseContentRange(headers.get('content-range'));
  const length = headers.get('content-length');
  const size = range ? range.total : length !== null ? Number(length) : NaN;
  if (!Number.isSafeInteger(size) || size < 0) return null;
  const v: Validator = { size };
  // Hugging Face puts the LFS object's sha256 in X-Linked-ETag; the plain ETag is the redirect's.
  const etag = headers.get('x-linked-etag') ?? headers.get('etag');
  if (etag) v.etag = etag.replace(/^W\//, '');
  const lastModified = headers.get('last-modified');
  if (lastModified) v.lastModified = lastModified;
  return v;
}

/**
 * Whether a cached copy made under `cached` is still the file the server describes now. The
 * strongest validator both sides have decides; sizes must always agree.
 */
export function sameVersion(cached: Validator, now: Validator): boolean {
  if (cached.size !== now.size) return false;
  if (cached.etag && now.etag) return cached.etag === now.etag;
  if (cached.lastModified && now.lastModified) return cached.lastModified === now.lastModified;
  // Size alone is too weak to trust a partial download, but says nothing against it either:
  // callers resume only with a real validator (see canResume).
  return true;
}

/** Resuming appends bytes to old ones: only safe when the server names the version. */
export function canResume(cached: Validator, now: Validator): boolean {
  return Boolean((now.etag || now.lastModified) && sameVersion(cached, now));
}

/** The cache key of a URL: hex SHA-256, so any URL makes a safe file name. */
export async function cacheKey(url: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, '0')).join('');
}
