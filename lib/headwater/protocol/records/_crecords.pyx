# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled record codec: the per-record loops of record.py, in C.

record.py stays the reference implementation (and the fallback when this module is not built, or
when HEADWATER_NO_EXTENSIONS=1); tests/unit/test_crecords.py checks the two against each other on
generated and on malformed input; count_origins (the audit's per-record counting) is checked
against counting.py in tests/unit/protocol/test_counting.py. Only the loops over records live here:
batch headers, CRCs and codecs stay in Python (they cost once per batch, not once per record).

Records are built straight as instances of the caller's NamedTuple class (``Record``, or the
consumer's ``ConsumerRecord`` with its topic and partition in ``prefix``), allocated as the tuple
subclass they are, without going through the class's Python ``__new__``.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint64_t
from libc.string cimport memcmp, memcpy

from headwater.protocol.errors import ErrorCode, KafkaError

cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t n)
    void PyObject_GC_UnTrack(void* op)
    void PyTuple_SET_ITEM(PyObject* p, Py_ssize_t pos, PyObject* o)
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    int PyByteArray_Resize(object ba, Py_ssize_t size) except -1
    char* PyByteArray_AS_STRING(object ba)
    Py_ssize_t PyByteArray_GET_SIZE(object ba)
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL
    bint PyUnicode_Check(object o)
    bint PyBytes_CheckExact(object o)
    bint PyTuple_CheckExact(object o)
    char* PyBytes_AS_STRING(object o)
    Py_ssize_t PyBytes_GET_SIZE(object o)
    object PySequence_Fast(object o, const char* m)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    PyObject* PySequence_Fast_GET_ITEM(object o, Py_ssize_t i)

cdef object _CORRUPT = ErrorCode.CORRUPT_MESSAGE
cdef bytes _EMPTY = b""
cdef tuple _NO_HEADERS = ()


cdef inline object _corrupt(str what):
    return KafkaError(_CORRUPT, what)


cdef inline Py_ssize_t _uvarint(const unsigned char* d, Py_ssize_t p, Py_ssize_t end, uint64_t* out) except -1:
    """The unsigned varint at ``p`` (at most 10 bytes) into ``out``; the new position."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if p >= end:
            raise _corrupt("a varint runs past the end of the records")
        b = d[p]
        p += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = result
            return p
        shift += 7
        if shift > 63:
            raise _corrupt("varint longer than 10 bytes")


cdef inline int64_t _unzigzag(uint64_t z):
    return <int64_t>(z >> 1) ^ -(<int64_t>(z & 1))


cdef inline void _set(PyObject* t, Py_ssize_t i, object item):
    Py_INCREF(item)
    PyTuple_SET_ITEM(t, i, <PyObject*>item)


cdef object _new_record(PyTypeObject* cls, tuple prefix, Py_ssize_t np, object offset, object ts,
                        object key, object value, object headers):
    """An instance of the NamedTuple class ``cls``: prefix items, then the record's five fields."""
    result = PyType_GenericAlloc(cls, np + 5)
    cdef PyObject* obj = <PyObject*>result
    cdef Py_ssize_t i
    for i in range(np):
        _set(obj, i, <object>PyTuple_GET_ITEM(prefix, i))
    _set(obj, np, offset)
    _set(obj, np + 1, ts)
    _set(obj, np + 2, key)
    _set(obj, np + 3, value)
    _set(obj, np + 4, headers)
    # Its items are ints, bytes, str, None and tuples of those: it can be part of no reference
    # cycle, so the collector need not follow it (CPython untracks such plain tuples itself, but not
    # instances of tuple subclasses). Without this a large fetch costs a full collection or two.
    PyObject_GC_UnTrack(obj)
    return result


cdef object _nullable_bytes(const unsigned char* d, Py_ssize_t* pp, Py_ssize_t end, str what):
    """A varint length then that many bytes (-1: null) at ``pp[0]``, which it advances."""
    cdef uint64_t z
    cdef Py_ssize_t p = _uvarint(d, pp[0], end, &z)
    cdef int64_t n = _unzigzag(z)
    if n >= 0:
        if p + n > end:
            raise _corrupt(f"record {what} of {n} bytes overruns the batch")
        pp[0] = p + n
        return PyBytes_FromStringAndSize(<const char*>d + p, <Py_ssize_t>n)
    if n == -1:
        pp[0] = p
        return None
    raise _corrupt(f"record {what} length {n}")


cdef tuple _parse_headers(const unsigned char* d, Py_ssize_t* pp, Py_ssize_t end):
    cdef uint64_t z
    cdef Py_ssize_t p = pp[0]
    cdef int64_t count, n, i
    p = _uvarint(d, p, end, &z)
    count = _unzigzag(z)
    if count < 0:
        raise _corrupt(f"record header count {count}")
    out = []
    for i in range(count):
        p = _uvarint(d, p, end, &z)
        n = _unzigzag(z)
        if n < 0 or p + n > end:
            raise _corrupt(f"record header key length {n} at byte {p}")
        try:
            hkey = PyUnicode_DecodeUTF8(<const char*>d + p, <Py_ssize_t>n, NULL)
        except UnicodeDecodeError as e:
            raise _corrupt(f"record header key is not UTF-8: {e}") from None
        p += n
        hvalue = _nullable_bytes(d, &p, end, "header value")
        out.append((hkey, hvalue))
    pp[0] = p
    return tuple(out)


def parse_records(const unsigned char[::1] data, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
                  int64_t max_ts, bint log_append, type cls, tuple prefix, int64_t min_offset):
    """``count`` records filling ``data`` exactly, as instances of ``cls`` after ``prefix``.

    Records below ``min_offset`` are checked but not returned (a fetch answers whole batches).
    """
    cdef const unsigned char* d = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0]
    cdef Py_ssize_t p = 0, rstart
    cdef Py_ssize_t np = PyTuple_GET_SIZE(prefix)
    cdef PyTypeObject* tp = <PyTypeObject*>cls
    cdef uint64_t z
    cdef int64_t length, offset, ts
    cdef Py_ssize_t i
    cdef list out = []
    for i in range(count):
        p = _uvarint(d, p, end, &z)
        length = _unzigzag(z)
        rstart = p
        if length < 0 or rstart + length > end:
            raise _corrupt(f"record length {length} at byte {rstart} overruns the {end - rstart} bytes left")
        p += 1  # attributes (int8, unused)
        p = _uvarint(d, p, end, &z)
        ts = max_ts if log_append else base_ts + _unzigzag(z)
        p = _uvarint(d, p, end, &z)
        offset = base_offset + _unzigzag(z)
        key = _nullable_bytes(d, &p, end, "key")
        value = _nullable_bytes(d, &p, end, "value")
        if p < end and d[p] == 0:
            headers = _NO_HEADERS
            p += 1
        else:
            headers = _parse_headers(d, &p, end)
        if p - rstart != length:
            raise _corrupt(f"record at byte {rstart} declares {length} bytes but holds {p - rstart}")
        if offset >= min_offset:
            out.append(_new_record(tp, prefix, np, offset, ts, key, value, headers))
    if p != end:
        raise _corrupt(f"{end - p} bytes follow the {count} records of the batch")
    return out


# -- counting by origin ---------------------------------------------------------------------------
# The reference is counting.py's _count_origins (what the audit did record by record in Python).
# Anything out of the ordinary -- a malformed record, a varint beyond 64 bits, an offset that
# overflows -- makes count_origins return None: the caller then runs the reference, which raises
# (or counts) exactly as before. Only the common case is fast; no case is counted differently.

cdef struct _Slot:
    int64_t window
    const unsigned char* dc  # the origin datacenter's bytes (inside the payload); NULL: unaudited
    Py_ssize_t dc_len
    int64_t n

cdef enum:
    _SLOTS = 16


cdef inline Py_ssize_t _uv(const unsigned char* d, Py_ssize_t p, Py_ssize_t end, uint64_t* out) noexcept nogil:
    """The unsigned varint at ``p`` into ``out``; the new position, or -1 for anything the reference
    would not read as a 64-bit value (past the end, longer than 10 bytes, bits beyond 64)."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if p >= end:
            return -1
        b = d[p]
        p += 1
        if shift == 63 and (b & 0x7E):
            return -1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            out[0] = result
            return p
        shift += 7
        if shift > 63:
            return -1


cdef inline bint _ascii(const unsigned char* s, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if s[i] & 0x80:
            return False
    return True


cdef inline int64_t _floor_window(int64_t t, int64_t w) noexcept nogil:
    cdef int64_t q = t / w
    if t % w != 0 and t < 0:
        q -= 1
    return q * w


cdef int _flush(_Slot* slots, Py_ssize_t n, dict out) except -1:
    cdef Py_ssize_t i
    for i in range(n):
        if slots[i].dc == NULL:
            key = (slots[i].window, None)
        else:
            key = (slots[i].window, PyUnicode_DecodeUTF8(<const char*>slots[i].dc, slots[i].dc_len, "replace"))
        out[key] = out.get(key, 0) + slots[i].n
    return 0


cdef inline bint _same(_Slot* slot, const unsigned char* dc, Py_ssize_t dc_len) noexcept nogil:
    if slot.dc == NULL or dc == NULL:
        return slot.dc == dc
    return slot.dc_len == dc_len and memcmp(slot.dc, dc, dc_len) == 0


cdef inline bint _digits(const unsigned char* s, Py_ssize_t n, int64_t* out) noexcept nogil:
    """Plain ASCII decimal digits (at most 18: no overflow) into ``out``."""
    cdef int64_t v = 0
    cdef Py_ssize_t i
    for i in range(n):
        if s[i] < 48 or s[i] > 57:
            return False
        v = v * 10 + (s[i] - 48)
    out[0] = v
    return True


def count_origins(const unsigned char[::1] data, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
                  int64_t max_ts, bint log_append, int64_t min_offset, int64_t window_ms,
                  bytes dc_header, bytes created_header, int64_t max_time, object created_value):
    """Records per (window start, origin datacenter or None) of ``count`` records filling ``data``;
    None when the reference must decide (see above). ``created_value(bytes, max_time)`` reads a
    creation time that is not plain digits, as the reference does."""
    cdef const unsigned char* d = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0]
    cdef Py_ssize_t p = 0, rstart, kp, k, hc, j
    cdef const unsigned char* dck = <const unsigned char*><const char*>dc_header
    cdef const unsigned char* crk = <const unsigned char*><const char*>created_header
    cdef Py_ssize_t dck_len = len(dc_header), crk_len = len(created_header)
    cdef uint64_t z
    cdef int64_t length, n, vn, delta, ts, offset, created, window
    cdef bint ts_ok, has_created
    cdef const unsigned char* dc
    cdef Py_ssize_t dc_len
    cdef _Slot slots[_SLOTS]
    cdef Py_ssize_t nslots = 0, last = 0, s
    cdef Py_ssize_t i
    cdef dict out = {}
    if window_ms <= 0:
        raise ValueError(f"window_ms {window_ms} is not positive")
    for i in range(count):
        p = _uv(d, p, end, &z)
        if p < 0:
            return None
        length = _unzigzag(z)
        rstart = p
        if length < 0 or length > end - rstart:
            return None
        p += 1  # attributes
        p = _uv(d, p, end, &z)
        if p < 0:
            return None
        ts_ok = True
        if log_append:
            ts = max_ts
        else:
            delta = _unzigzag(z)
            if (delta > 0 and base_ts > INT64_MAX - delta) or (delta < 0 and base_ts < INT64_MIN - delta):
                ts_ok = False
                ts = 0
            else:
                ts = base_ts + delta
        p = _uv(d, p, end, &z)
        if p < 0:
            return None
        delta = _unzigzag(z)
        if (delta > 0 and base_offset > INT64_MAX - delta) or (delta < 0 and base_offset < INT64_MIN - delta):
            return None
        offset = base_offset + delta
        for k in range(2):  # key, value
            p = _uv(d, p, end, &z)
            if p < 0:
                return None
            n = _unzigzag(z)
            if n >= 0:
                if n > end - p:
                    return None
                p += n
            elif n != -1:
                return None
        if p >= end:
            return None
        dc = NULL
        dc_len = 0
        has_created = False
        created = 0
        if d[p] == 0:
            p += 1
        else:
            p = _uv(d, p, end, &z)
            if p < 0:
                return None
            hc = <Py_ssize_t>_unzigzag(z)
            if _unzigzag(z) < 0:
                return None
            for j in range(hc):
                p = _uv(d, p, end, &z)
                if p < 0:
                    return None
                n = _unzigzag(z)
                if n < 0 or n > end - p:
                    return None
                k = <Py_ssize_t>n
                kp = p
                p += k
                p = _uv(d, p, end, &z)
                if p < 0:
                    return None
                vn = _unzigzag(z)
                if vn >= 0:
                    if vn > end - p:
                        return None
                elif vn != -1:
                    return None
                if k == dck_len and memcmp(d + kp, dck, k) == 0:
                    if vn >= 0:
                        dc = d + p
                        dc_len = <Py_ssize_t>vn
                elif k == crk_len and memcmp(d + kp, crk, k) == 0:
                    if vn >= 0:
                        if 0 < vn <= 18 and _digits(d + p, <Py_ssize_t>vn, &created):
                            has_created = created < max_time
                        else:
                            got = created_value(PyBytes_FromStringAndSize(<const char*>d + p, <Py_ssize_t>vn),
                                                max_time)
                            has_created = got is not None
                            if has_created:
                                created = got
                elif not _ascii(d + kp, k):
                    try:
                        PyUnicode_DecodeUTF8(<const char*>d + kp, k, NULL)
                    except UnicodeDecodeError:
                        return None
                if vn > 0:
                    p += vn
        if p - rstart != length:
            return None
        if offset < min_offset:
            continue
        if dc != NULL and has_created:
            window = created // window_ms * window_ms
        else:
            dc = NULL
            if not ts_ok or ts < -max_time or ts >= max_time:
                ts = -1
            window = _floor_window(ts, window_ms)
        if nslots and slots[last].window == window and _same(&slots[last], dc, dc_len):
            slots[last].n += 1
            continue
        for s in range(nslots):
            if slots[s].window == window and _same(&slots[s], dc, dc_len):
                break
        else:
            if nslots == _SLOTS:
                _flush(slots, nslots, out)
                nslots = 0
            s = nslots
            nslots += 1
            slots[s].window = window
            slots[s].dc = dc
            slots[s].dc_len = dc_len
            slots[s].n = 0
        slots[s].n += 1
        last = s
    if p != end:
        return None
    _flush(slots, nslots, out)
    return out


# -- encoding ------------------------------------------------------------------------------------

cdef inline Py_ssize_t _put_uvarint(unsigned char* d, uint64_t z):
    cdef Py_ssize_t n = 0
    while z > 0x7F:
        d[n] = <unsigned char>((z & 0x7F) | 0x80)
        z >>= 7
        n += 1
    d[n] = <unsigned char>z
    return n + 1


cdef inline uint64_t _zigzag(int64_t v):
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline Py_ssize_t _varint_size(uint64_t z):
    cdef Py_ssize_t n = 1
    while z > 0x7F:
        z >>= 7
        n += 1
    return n


cdef Py_ssize_t _reserve(bytearray out, Py_ssize_t used, Py_ssize_t more) except -1:
    cdef Py_ssize_t have = PyByteArray_GET_SIZE(out)
    if used + more > have:
        PyByteArray_Resize(out, max(used + more, have * 2))
    return 0


cdef inline Py_ssize_t _value_len(object v) except -1:
    """A header value's length: of bytes directly, of any other buffer through a memoryview (the
    reference's ``len``)."""
    cdef const unsigned char[::1] view
    if PyBytes_CheckExact(v):
        return PyBytes_GET_SIZE(v)
    view = v
    return view.shape[0]


cdef inline unsigned char* _put_value(unsigned char* d, object v) except NULL:
    """Write a header value's length and bytes at ``d``; the position after them."""
    cdef const unsigned char[::1] view
    cdef Py_ssize_t n
    if PyBytes_CheckExact(v):
        n = PyBytes_GET_SIZE(v)
        d += _put_uvarint(d, _zigzag(n))
        memcpy(d, PyBytes_AS_STRING(v), n)
        return d + n
    view = v
    n = view.shape[0]
    d += _put_uvarint(d, _zigzag(n))
    if n:
        memcpy(d, &view[0], n)
    return d + n


cdef inline const char* _utf8(object hkey, Py_ssize_t* n) except NULL:
    """A header key's UTF-8 bytes without a new object: str keeps its UTF-8 form (for an ASCII key
    its own data; else encoded once and cached in the str), so a repeated key costs no encoding."""
    if not PyUnicode_Check(hkey):
        hkey.encode("utf-8")  # the reference's error (AttributeError) for a key that is not a str
    return PyUnicode_AsUTF8AndSize(hkey, n)


cdef Py_ssize_t _headers_size(object hdrs, Py_ssize_t count) except -1:
    """The encoded size of ``count`` headers (count varint included); checks every key and value."""
    cdef Py_ssize_t size = _varint_size(_zigzag(count)), i, kn, vn
    for i in range(count):
        h = <object>PySequence_Fast_GET_ITEM(hdrs, i)
        if PyTuple_CheckExact(h) and PyTuple_GET_SIZE(h) == 2:  # what the producer queues: no unpacking
            hkey = <object>PyTuple_GET_ITEM(h, 0)
            hvalue = <object>PyTuple_GET_ITEM(h, 1)
        else:
            hkey, hvalue = h
        _utf8(hkey, &kn)
        size += _varint_size(_zigzag(kn)) + kn
        if hvalue is None:
            size += 1
        else:
            vn = _value_len(hvalue)
            size += _varint_size(_zigzag(vn)) + vn
    return size


cdef unsigned char* _put_headers(unsigned char* d, object hdrs, Py_ssize_t count) except NULL:
    """Write ``count`` headers at ``d`` (sized by _headers_size); the position after them."""
    cdef Py_ssize_t i, kn
    cdef const char* kp
    d += _put_uvarint(d, _zigzag(count))
    for i in range(count):
        h = <object>PySequence_Fast_GET_ITEM(hdrs, i)
        if PyTuple_CheckExact(h) and PyTuple_GET_SIZE(h) == 2:
            hkey = <object>PyTuple_GET_ITEM(h, 0)
            hvalue = <object>PyTuple_GET_ITEM(h, 1)
        else:
            hkey, hvalue = h
        kp = _utf8(hkey, &kn)
        d += _put_uvarint(d, _zigzag(kn))
        memcpy(d, kp, kn)
        d += kn
        if hvalue is None:
            d[0] = 1  # zigzag(-1)
            d += 1
        else:
            d = _put_value(d, hvalue)
    return d


def encode_records(bytearray out, records, int64_t base_ts):
    """Append the encoded ``records`` (key, value, timestamp, headers) to ``out``, at offset deltas
    0..n-1; the largest timestamp. ``out`` holds the batch header already; it is resized to fit.

    Headers are written straight into ``out``: their size first (one pass over the keys and values,
    which also checks them), then their bytes; no object per record or per header for str keys and
    bytes values (what the producer queues). A record whose headers are the very object the record
    before had (the auditing producer's origin headers, one tuple per millisecond) gets a copy of
    that record's encoded headers."""
    cdef Py_ssize_t used = PyByteArray_GET_SIZE(out)
    cdef int64_t max_ts = base_ts, ts, i = 0
    cdef const unsigned char[::1] kv
    cdef const unsigned char[::1] vv
    cdef Py_ssize_t klen, vlen, body, hsize, hcount, hstart
    cdef Py_ssize_t last_start = 0, last_size = 0  # where the last encoded headers are in ``out``
    cdef object last_hdrs = None  # ... and whose they are
    cdef bint repeat
    cdef unsigned char* d
    cdef uint64_t tz
    cdef object hseq
    for rec in records:
        key, value, t, hdrs = rec
        try:
            ts = t
        except OverflowError:
            raise ValueError(f"{t} does not fit a varlong") from None
        if (base_ts < 0 and ts > INT64_MAX + base_ts) or (base_ts > 0 and ts < INT64_MIN + base_ts):
            raise ValueError(f"timestamp delta {t - base_ts} does not fit a varlong")
        if ts > max_ts:
            max_ts = ts
        tz = _zigzag(ts - base_ts)
        if key is None:
            klen = -1
        else:
            kv = key
            klen = kv.shape[0]
        if value is None:
            vlen = -1
        else:
            vv = value
            vlen = vv.shape[0]
        repeat = False
        if not hdrs:
            hseq = None
            hcount = 0
            hsize = 1
        elif hdrs is last_hdrs:
            repeat = True
            hseq = None
            hcount = 0
            hsize = last_size
        else:
            hseq = PySequence_Fast(hdrs, "record headers must be a sequence")
            hcount = PySequence_Fast_GET_SIZE(hseq)
            hsize = _headers_size(hseq, hcount)
        body = (1 + _varint_size(tz) + _varint_size(_zigzag(i))
                + _varint_size(_zigzag(klen)) + (klen if klen > 0 else 0)
                + _varint_size(_zigzag(vlen)) + (vlen if vlen > 0 else 0) + hsize)
        _reserve(out, used, body + 10)
        d = <unsigned char*>PyByteArray_AS_STRING(out) + used
        d += _put_uvarint(d, _zigzag(body))
        d[0] = 0  # attributes
        d += 1
        d += _put_uvarint(d, tz)
        d += _put_uvarint(d, _zigzag(i))
        d += _put_uvarint(d, _zigzag(klen))
        if klen > 0:
            memcpy(d, &kv[0], klen)
            d += klen
        d += _put_uvarint(d, _zigzag(vlen))
        if vlen > 0:
            memcpy(d, &vv[0], vlen)
            d += vlen
        if repeat:  # the bytes of the same headers, earlier in ``out`` (no overlap: they end before ``used``)
            memcpy(d, <unsigned char*>PyByteArray_AS_STRING(out) + last_start, hsize)
            d += hsize
        elif hseq is None:
            d[0] = 0
            d += 1
        else:
            hstart = d - <unsigned char*>PyByteArray_AS_STRING(out)
            d = _put_headers(d, hseq, hcount)
            last_hdrs, last_start, last_size = hdrs, hstart, hsize
        used = d - <unsigned char*>PyByteArray_AS_STRING(out)
        i += 1
    PyByteArray_Resize(out, used)
    return max_ts
