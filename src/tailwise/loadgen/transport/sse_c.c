/* The compiled fast path of tailwise.loadgen.transport.sse_fast: one SSE event, one content delta.
 *
 * content(body: bytes) -> str | None
 * finish(body: bytes) -> tuple[str, str] | None: the same shape with a finish_reason string
 * usage(body: bytes) -> tuple[int | None, int | None] | None: the usage chunk's counts
 * chunk(data: bytes) -> str | None: content() of one whole HTTP chunk (framing included)
 *
 * ``body`` is one piece of an HTTP response body. The answer is the ``content`` string of
 * ``choices[0].delta`` when, and only when, the piece is exactly one SSE event
 * (``data:`` with one optional space, a JSON object, ``\n\n``, no other line break) whose
 * JSON is valid and an OpenAI chat chunk that says nothing else the classifier reads:
 * top-level keys among id/object/created/model/system_fingerprint/choices (``object``
 * not "error"), choices[0] keys among index/delta/logprobs/finish_reason/stop_reason with
 * a null finish_reason, delta keys among content/role, no key twice, content a string
 * with no escape. Anything else is None: the caller then runs the full Python path
 * (sse.SSEParser + llm_stream.classify), so a None is never wrong, only slower.
 *
 * Bounded: one pass over the bytes, nesting at most MAX_DEPTH deep, no allocation but
 * the answer. Invalid UTF-8 anywhere in a string, a control character, an unknown
 * escape, NaN or Infinity: None (the Python path classifies them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_CHUNK_DIGITS 7 /* a chunk under 256 MiB: far above MAX_EVENT_BYTES */
#define MAX_NUMBER 1000 /* characters: Python's int() refuses over 4300 digits */

#define MAX_TOKEN_COUNT 2147483647LL /* llm_stream.MAX_TOKEN_COUNT */

enum ctx { OTHER, TOP, CHOICES, CHOICE0, DELTA, USAGE };

typedef struct {
    const unsigned char *p, *end;
    const unsigned char *content;  /* the content string's bytes, unescaped */
    Py_ssize_t content_len;
    int has_content;
    const unsigned char *finish; /* finish_reason's bytes, when a string without escapes */
    Py_ssize_t finish_len;
    int has_finish;
    int has_usage, choices_empty;
    long long prompt_tokens, completion_tokens; /* -1: not given */
} scan;

static int value(scan *s, enum ctx ctx, int depth);

static void ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t')) s->p++;
}

/* A JSON string at s->p (the opening quote). Sets *start and *len to its raw bytes and
 * *escaped when it holds a backslash. 0 on success. */
static int string(scan *s, const unsigned char **start, Py_ssize_t *len, int *escaped) {
    if (s->p >= s->end || *s->p != '"') return -1;
    s->p++;
    *start = s->p;
    *escaped = 0;
    while (s->p < s->end) {
        unsigned char c = *s->p;
        if (c == '"') {
            *len = s->p - *start;
            s->p++;
            return 0;
        }
        if (c < 0x20) return -1;
        if (c == '\\') {
            *escaped = 1;
            if (s->p + 1 >= s->end) return -1;
            unsigned char e = s->p[1];
            if (e == 'u') {
                if (s->p + 6 > s->end) return -1;
                for (int i = 2; i < 6; i++) {
                    unsigned char h = s->p[i];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                        return -1;
                }
                s->p += 6;
            } else if (strchr("\"\\/bfnrt", e) != NULL && e != 0) {
                s->p += 2;
            } else {
                return -1;
            }
            continue;
        }
        if (c < 0x80) {
            s->p++;
            continue;
        }
        /* UTF-8, strictly: no overlong forms, no surrogates, nothing above U+10FFFF */
        Py_ssize_t left = s->end - s->p;
        if (c >= 0xC2 && c <= 0xDF) {
            if (left < 2 || (s->p[1] & 0xC0) != 0x80) return -1;
            s->p += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (left < 3 || (s->p[1] & 0xC0) != 0x80 || (s->p[2] & 0xC0) != 0x80) return -1;
            if (c == 0xE0 && s->p[1] < 0xA0) return -1;
            if (c == 0xED && s->p[1] > 0x9F) return -1;
            s->p += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (left < 4 || (s->p[1] & 0xC0) != 0x80 || (s->p[2] & 0xC0) != 0x80 ||
                (s->p[3] & 0xC0) != 0x80)
                return -1;
            if (c == 0xF0 && s->p[1] < 0x90) return -1;
            if (c == 0xF4 && s->p[1] > 0x8F) return -1;
            s->p += 4;
        } else {
            return -1;
        }
    }
    return -1;
}

static int number(scan *s) {
    const unsigned char *p = s->p;
    if (p < s->end && *p == '-') p++;
    if (p >= s->end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    } else {
        return -1;
    }
    if (p < s->end && *p == '.') {
        p++;
        if (p >= s->end || *p < '0' || *p > '9') return -1;
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < s->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < s->end && (*p == '+' || *p == '-')) p++;
        if (p >= s->end || *p < '0' || *p > '9') return -1;
        while (p < s->end && *p >= '0' && *p <= '9') p++;
    }
    if (p - s->p > MAX_NUMBER) return -1;
    s->p = p;
    return 0;
}

/* A token count: digits only (no sign, fraction or exponent), at most MAX_TOKEN_COUNT;
 * -1 for anything else (the classifier reads other numbers otherwise, or refuses them). */
static long long count(scan *s) {
    const unsigned char *p = s->p;
    long long v = 0;
    if (p >= s->end || *p < '0' || *p > '9') return -1;
    if (*p == '0' && p + 1 < s->end && p[1] >= '0' && p[1] <= '9') return -1; /* 01: not JSON */
    while (p < s->end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        if (v > MAX_TOKEN_COUNT) return -1;
        p++;
    }
    if (p < s->end && (*p == '.' || *p == 'e' || *p == 'E')) return -1;
    s->p = p;
    return v;
}

static int literal(scan *s, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0) return -1;
    s->p += n;
    return 0;
}

static int key_is(const unsigned char *k, Py_ssize_t n, const char *name) {
    return (size_t)n == strlen(name) && memcmp(k, name, (size_t)n) == 0;
}

/* Which child context a key of an object in ``ctx`` opens; -1: a key not allowed. A bit
 * per allowed key in *seen catches a key given twice. */
static int child(enum ctx ctx, const unsigned char *k, Py_ssize_t n, unsigned *seen, int *slot) {
    static const char *top[] = {"id", "object", "created", "model", "system_fingerprint", "choices", "usage", NULL};
    static const char *choice[] = {"index", "delta", "logprobs", "finish_reason", "stop_reason", NULL};
    static const char *delta[] = {"content", "role", NULL};
    static const char *usage[] = {"prompt_tokens", "completion_tokens", "total_tokens", NULL};
    const char **names = ctx == TOP ? top : ctx == CHOICE0 ? choice : ctx == DELTA ? delta
                       : ctx == USAGE ? usage : NULL;
    if (names == NULL) return OTHER;
    for (int i = 0; names[i] != NULL; i++) {
        if (key_is(k, n, names[i])) {
            if (*seen & (1u << i)) return -1;
            *seen |= 1u << i;
            *slot = i;
            if (ctx == TOP && i == 5) return CHOICES;
            if (ctx == TOP && i == 6) return USAGE;
            if (ctx == CHOICE0 && i == 1) return DELTA;
            return OTHER;
        }
    }
    return -1;
}

static int object(scan *s, enum ctx ctx, int depth) {
    unsigned seen = 0;
    s->p++; /* '{' */
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return ctx == TOP ? -1 : 0;
    }
    for (;;) {
        const unsigned char *k;
        Py_ssize_t n;
        int esc, slot = -1;
        ws(s);
        if (string(s, &k, &n, &esc) != 0) return -1;
        if (esc && ctx != OTHER) return -1; /* an escaped key could spell a known one */
        ws(s);
        if (s->p >= s->end || *s->p != ':') return -1;
        s->p++;
        ws(s);
        int next = child(ctx, k, n, &seen, &slot);
        if (next < 0) return -1;
        if (ctx == TOP && slot == 1) { /* "object": a string, not "error" */
            const unsigned char *v;
            Py_ssize_t vn;
            int vesc;
            if (s->p < s->end && *s->p == '"') {
                if (string(s, &v, &vn, &vesc) != 0 || vesc || key_is(v, vn, "error")) return -1;
            } else if (value(s, OTHER, depth + 1) != 0) {
                return -1;
            }
        } else if (ctx == USAGE && slot < 2) { /* a token count: a plain int in range */
            long long v = count(s);
            if (v < 0) return -1;
            if (slot == 0) s->prompt_tokens = v; else s->completion_tokens = v;
        } else if (ctx == CHOICE0 && slot == 3) { /* finish_reason: null, or a plain string */
            if (s->p < s->end && *s->p == '"') {
                int fesc;
                /* "" is no finish to the classifier: declined, as an escape is */
                if (string(s, &s->finish, &s->finish_len, &fesc) != 0 || fesc || !s->finish_len)
                    return -1;
                s->has_finish = 1;
            } else if (literal(s, "null") != 0) {
                return -1;
            }
        } else if (ctx == DELTA && slot == 0) { /* content: a string without escapes */
            const unsigned char *v;
            Py_ssize_t vn;
            int vesc;
            if (string(s, &v, &vn, &vesc) != 0 || vesc) return -1;
            s->content = v;
            s->content_len = vn;
            s->has_content = 1;
        } else if (value(s, (enum ctx)next, depth + 1) != 0) {
            return -1;
        }
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p == '}') {
            s->p++;
            break;
        }
        return -1;
    }
    if (ctx == TOP && !(seen & (1u << 5))) return -1;  /* no choices */
    if (ctx == TOP && (seen & (1u << 6))) s->has_usage = 1;
    if (ctx == CHOICE0 && !(seen & (1u << 1))) return -1; /* no delta */
    return 0;
}

static int array(scan *s, enum ctx ctx, int depth) {
    int i = 0;
    s->p++; /* '[' */
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        if (ctx == CHOICES) s->choices_empty = 1; /* the usage chunk's shape */
        return 0;
    }
    for (;; i++) {
        ws(s);
        enum ctx next = (ctx == CHOICES && i == 0) ? CHOICE0 : OTHER;
        if (value(s, next, depth + 1) != 0) return -1;
        ws(s);
        if (s->p >= s->end) return -1;
        if (*s->p == ',') {
            s->p++;
            continue;
        }
        if (*s->p == ']') {
            s->p++;
            return 0;
        }
        return -1;
    }
}

static int value(scan *s, enum ctx ctx, int depth) {
    if (depth > MAX_DEPTH || s->p >= s->end) return -1;
    unsigned char c = *s->p;
    if (ctx == TOP || ctx == CHOICE0 || ctx == DELTA || ctx == USAGE) {
        return c == '{' ? object(s, ctx, depth) : -1;
    }
    if (ctx == CHOICES) {
        return c == '[' ? array(s, ctx, depth) : -1;
    }
    switch (c) {
    case '{':
        return object(s, OTHER, depth);
    case '[':
        return array(s, OTHER, depth);
    case '"': {
        const unsigned char *v;
        Py_ssize_t n;
        int esc;
        return string(s, &v, &n, &esc);
    }
    case 't':
        return literal(s, "true");
    case 'f':
        return literal(s, "false");
    case 'n':
        return literal(s, "null");
    default:
        return number(s);
    }
}

/* Scans the event b[0:n] (see the top) into *s; 0 when it is one of the shape read here. */
static int scan_event(const unsigned char *b, Py_ssize_t n, scan *s) {
    if (n < 9 || memcmp(b, "data:", 5) != 0 || b[n - 1] != '\n' || b[n - 2] != '\n') return -1;
    const unsigned char *start = b + 5;
    if (*start == ' ') start++;
    const unsigned char *stop = b + n - 2;
    if (memchr(start, '\n', (size_t)(stop - start)) != NULL ||
        memchr(start, '\r', (size_t)(stop - start)) != NULL)
        return -1;
    memset(s, 0, sizeof *s);
    s->prompt_tokens = s->completion_tokens = -1;
    s->p = start;
    s->end = stop;
    ws(s);
    if (value(s, TOP, 0) != 0) return -1;
    ws(s);
    return s->p == s->end ? 0 : -1;
}

static PyObject *text_of(const unsigned char *b, Py_ssize_t n) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)b, n, "strict");
    if (text == NULL) PyErr_Clear(); /* not reached: the bytes were checked in the scan */
    return text;
}

/* The content of the event b[0:n] (see the top), a new reference; None to decline. */
static PyObject *event_content(const unsigned char *b, Py_ssize_t n) {
    scan s;
    if (scan_event(b, n, &s) != 0 || !s.has_content || s.has_finish || s.has_usage)
        Py_RETURN_NONE;
    PyObject *text = text_of(s.content, s.content_len);
    if (text == NULL) Py_RETURN_NONE;
    return text;
}

static int bytes_of(PyObject *arg, const unsigned char **b, Py_ssize_t *n, const char *name) {
    char *buf;
    if (!PyBytes_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s() takes bytes", name);
        return -1;
    }
    if (PyBytes_AsStringAndSize(arg, &buf, n) != 0) return -1;
    *b = (const unsigned char *)buf;
    return 0;
}

static PyObject *content(PyObject *self, PyObject *arg) {
    (void)self;
    const unsigned char *b;
    Py_ssize_t n;
    if (bytes_of(arg, &b, &n, "content") != 0) return NULL;
    return event_content(b, n);
}

/* finish(body) -> (str, str) | None: (content or "", finish_reason) of one event of the
 * same shape as content()'s but with a finish_reason that is a string. */
static PyObject *finish(PyObject *self, PyObject *arg) {
    (void)self;
    const unsigned char *b;
    Py_ssize_t n;
    scan s;
    if (bytes_of(arg, &b, &n, "finish") != 0) return NULL;
    if (scan_event(b, n, &s) != 0 || !s.has_finish || s.has_usage) Py_RETURN_NONE;
    PyObject *text = s.has_content ? text_of(s.content, s.content_len) : PyUnicode_New(0, 0);
    if (text == NULL) Py_RETURN_NONE;
    PyObject *reason = text_of(s.finish, s.finish_len);
    if (reason == NULL) {
        Py_DECREF(text);
        Py_RETURN_NONE;
    }
    PyObject *pair = PyTuple_Pack(2, text, reason);
    Py_DECREF(text);
    Py_DECREF(reason);
    return pair;
}

static PyObject *count_or_none(long long v) {
    if (v < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

/* usage(body) -> (int | None, int | None) | None: (prompt_tokens, completion_tokens) of
 * the usage chunk (empty choices, a usage object of plain counts and total_tokens). */
static PyObject *usage(PyObject *self, PyObject *arg) {
    (void)self;
    const unsigned char *b;
    Py_ssize_t n;
    scan s;
    if (bytes_of(arg, &b, &n, "usage") != 0) return NULL;
    if (scan_event(b, n, &s) != 0 || !s.has_usage || !s.choices_empty) Py_RETURN_NONE;
    PyObject *prompt = count_or_none(s.prompt_tokens);
    if (prompt == NULL) return NULL;
    PyObject *completion = count_or_none(s.completion_tokens);
    if (completion == NULL) {
        Py_DECREF(prompt);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, prompt, completion);
    Py_DECREF(prompt);
    Py_DECREF(completion);
    return pair;
}

/* chunk(data) -> str | None: ``data`` is exactly one whole HTTP chunk (hex size, CRLF,
 * that many bytes, CRLF; no extension, size > 0) whose bytes are one event content()
 * reads. The caller knows the parser stands between chunks (see http_stream). */
/* 0 when b[0:n] is one whole HTTP chunk whose event content() reads; *s then holds it. */
static int chunk_event(const unsigned char *b, Py_ssize_t n, scan *s) {
    Py_ssize_t i = 0, size = 0;
    for (; i < n && i < MAX_CHUNK_DIGITS; i++) {
        unsigned char c = b[i];
        int d = (c >= '0' && c <= '9') ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
        if (d < 0) break;
        size = size * 16 + d;
    }
    if (i == 0 || size == 0 || n - i < 4 || b[i] != '\r' || b[i + 1] != '\n') return -1;
    if (size != n - i - 4 || b[n - 2] != '\r' || b[n - 1] != '\n') return -1;
    if (scan_event(b + i + 2, size, s) != 0 || !s->has_content || s->has_finish || s->has_usage)
        return -1;
    return 0;
}

static PyObject *chunk_text(const unsigned char *b, Py_ssize_t n) {
    scan s;
    if (chunk_event(b, n, &s) != 0) Py_RETURN_NONE;
    PyObject *text = text_of(s.content, s.content_len);
    if (text == NULL) Py_RETURN_NONE;
    return text;
}

static PyObject *chunk(PyObject *self, PyObject *arg) {
    (void)self;
    const unsigned char *b;
    Py_ssize_t n;
    if (bytes_of(arg, &b, &n, "chunk") != 0) return NULL;
    return chunk_text(b, n);
}

#ifdef __linux__
#include "rx_c.h"
#endif

static PyMethodDef methods[] = {
    {"content", content, METH_O,
     "The content of a plain OpenAI chat delta in one SSE event, or None (see sse_fast)."},
    {"finish", finish, METH_O,
     "(content, finish_reason) of a plain OpenAI chat delta that ends the answer, or None."},
    {"usage", usage, METH_O,
     "(prompt_tokens, completion_tokens) of a plain usage chunk (no choices), or None."},
    {"chunk", chunk, METH_O,
     "content() of one whole HTTP chunk's bytes (size line, data, CRLF), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tailwise.loadgen.transport.sse_c",
    "Compiled fast path of tailwise.loadgen.transport.sse_fast.", -1, methods,
};

PyMODINIT_FUNC PyInit_sse_c(void) {
    PyObject *m = PyModule_Create(&module);
#ifdef __linux__
    if (m != NULL && add_reader_type(m) != 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
