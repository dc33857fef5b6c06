/* The compiled fast path of tailwise.loadgen.sse_fast: one SSE event, one content delta.
 *
 * content(body: bytes) -> str | None
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
#define MAX_NUMBER 1000 /* characters: Python's int() refuses over 4300 digits */

enum ctx { OTHER, TOP, CHOICES, CHOICE0, DELTA };

typedef struct {
    const unsigned char *p, *end;
    const unsigned char *content;  /* the content string's bytes, unescaped */
    Py_ssize_t content_len;
    int has_content;
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
    static const char *top[] = {"id", "object", "created", "model", "system_fingerprint", "choices", NULL};
    static const char *choice[] = {"index", "delta", "logprobs", "finish_reason", "stop_reason", NULL};
    static const char *delta[] = {"content", "role", NULL};
    const char **names = ctx == TOP ? top : ctx == CHOICE0 ? choice : ctx == DELTA ? delta : NULL;
    if (names == NULL) return OTHER;
    for (int i = 0; names[i] != NULL; i++) {
        if (key_is(k, n, names[i])) {
            if (*seen & (1u << i)) return -1;
            *seen |= 1u << i;
            *slot = i;
            if (ctx == TOP && i == 5) return CHOICES;
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
        } else if (ctx == CHOICE0 && slot == 3) { /* finish_reason: null only */
            if (literal(s, "null") != 0) return -1;
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
    if (ctx == CHOICE0 && !(seen & (1u << 1))) return -1; /* no delta */
    return 0;
}

static int array(scan *s, enum ctx ctx, int depth) {
    int i = 0;
    s->p++; /* '[' */
    ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return ctx == CHOICES ? -1 : 0; /* empty choices: the usage chunk's shape */
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
    if (ctx == TOP || ctx == CHOICE0 || ctx == DELTA) {
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

static PyObject *content(PyObject *self, PyObject *arg) {
    (void)self;
    char *buf;
    Py_ssize_t n;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "content() takes bytes");
        return NULL;
    }
    if (PyBytes_AsStringAndSize(arg, &buf, &n) != 0) return NULL;
    const unsigned char *b = (const unsigned char *)buf;
    if (n < 9 || memcmp(b, "data:", 5) != 0 || b[n - 1] != '\n' || b[n - 2] != '\n')
        Py_RETURN_NONE;
    const unsigned char *start = b + 5;
    if (*start == ' ') start++;
    const unsigned char *stop = b + n - 2;
    if (memchr(start, '\n', (size_t)(stop - start)) != NULL ||
        memchr(start, '\r', (size_t)(stop - start)) != NULL)
        Py_RETURN_NONE;
    scan s = {start, stop, NULL, 0, 0};
    ws(&s);
    if (value(&s, TOP, 0) != 0) Py_RETURN_NONE;
    ws(&s);
    if (s.p != s.end || !s.has_content) Py_RETURN_NONE;
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s.content, s.content_len, "strict");
    if (text == NULL) { /* not reached: the bytes were checked above; decline all the same */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return text;
}

static PyMethodDef methods[] = {
    {"content", content, METH_O,
     "The content of a plain OpenAI chat delta in one SSE event, or None (see sse_fast)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tailwise.loadgen.sse_c",
    "Compiled fast path of tailwise.loadgen.sse_fast.", -1, methods,
};

PyMODINIT_FUNC PyInit_sse_c(void) { return PyModule_Create(&module); }
