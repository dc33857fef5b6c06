/* The compiled fast path of tailwise.loadgen.transport.http_conn: one whole, plain HTTP answer.
 *
 * response(data: bytes) -> int
 *
 * Nearly every read of a plain HTTP run is one whole small answer: a status line, a few
 * headers, a Content-Length body, all in one segment. response() returns the status code
 * when, and only when, ``data`` is exactly that, in the narrow shape below, and 0 for
 * anything else; the connection then feeds httptools as before, so a 0 is never wrong,
 * only slower. The shape is a subset of what llhttp (httptools' parser) accepts as one
 * complete keep-alive response with that status, checked by tests/loadgen/test_http_fast.py
 * on generated and hostile answers:
 *
 * - ``HTTP/1.1 `` (exactly), three digits for a status in 200-399 but not 204 or 304
 *   (no interim answers, no answers whose body rules differ, no error answers: those keep
 *   the path that samples their body), a space, a reason of printable ASCII, CRLF;
 * - header lines ``name:value`` CRLF, the name a token, the value printable ASCII or tab;
 * - exactly one Content-Length of 1 to 15 digits (optional spaces or tabs around them);
 * - no Transfer-Encoding, Upgrade or Proxy-Connection, and a Connection header, if any, of
 *   ``keep-alive``;
 * - an empty line, then a body of exactly Content-Length bytes ending where ``data`` ends.
 *
 * The caller uses it only at the start of a response (its parser stands between two
 * messages), which one whole message leaves unchanged. Bounded: one pass, no allocation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_LENGTH_DIGITS 15 /* under 10^15 bytes: no overflow, far above any answer */

static int is_tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int is_text(unsigned char c) { return c == '\t' || (c >= 0x20 && c <= 0x7e); }

/* Whether the n bytes at ``a`` are ``lower`` in any case (``lower`` is lowercase ASCII). */
static int same_ci(const unsigned char *a, Py_ssize_t n, const char *lower) {
    Py_ssize_t k = 0;
    for (; k < n && lower[k]; k++) {
        unsigned char c = a[k];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c + 32);
        if (c != (unsigned char)lower[k]) return 0;
    }
    return k == n && lower[k] == '\0';
}

/* The status of one whole plain answer in b[0:n] (see above), or 0. */
static int whole_response(const unsigned char *b, Py_ssize_t n) {
    Py_ssize_t i = 12, length = -1;
    int status;
    if (n < 16 || memcmp(b, "HTTP/1.1 ", 9) != 0) return 0;
    for (Py_ssize_t k = 9; k < 12; k++)
        if (b[k] < '0' || b[k] > '9') return 0;
    status = (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
    if (status < 200 || status > 399 || status == 204 || status == 304) return 0;
    if (b[i++] != ' ') return 0;
    while (i < n && b[i] >= 0x20 && b[i] <= 0x7e) i++;
    if (i + 1 >= n || b[i] != '\r' || b[i + 1] != '\n') return 0;
    i += 2;
    for (;;) {
        Py_ssize_t name = i, name_len, value, value_end;
        if (i + 1 >= n) return 0;
        if (b[i] == '\r' && b[i + 1] == '\n') {
            i += 2;
            break;
        }
        while (i < n && is_tchar(b[i])) i++;
        name_len = i - name;
        if (name_len == 0 || i >= n || b[i] != ':') return 0;
        i++;
        while (i < n && (b[i] == ' ' || b[i] == '\t')) i++;
        value = i;
        while (i < n && is_text(b[i])) i++;
        value_end = i;
        while (value_end > value && (b[value_end - 1] == ' ' || b[value_end - 1] == '\t'))
            value_end--;
        if (i + 1 >= n || b[i] != '\r' || b[i + 1] != '\n') return 0;
        i += 2;
        if (same_ci(b + name, name_len, "content-length")) {
            Py_ssize_t digits = value_end - value;
            if (length >= 0 || digits < 1 || digits > MAX_LENGTH_DIGITS) return 0;
            length = 0;
            for (Py_ssize_t k = value; k < value_end; k++) {
                if (b[k] < '0' || b[k] > '9') return 0;
                length = length * 10 + (b[k] - '0');
            }
        } else if (same_ci(b + name, name_len, "connection")) {
            if (!same_ci(b + value, value_end - value, "keep-alive")) return 0;
        } else if (same_ci(b + name, name_len, "transfer-encoding") ||
                   same_ci(b + name, name_len, "upgrade") ||
                   /* llhttp reads it as Connection: a close there ends the connection */
                   same_ci(b + name, name_len, "proxy-connection")) {
            return 0;
        }
    }
    return (length >= 0 && n - i == length) ? status : 0;
}

static PyObject *response(PyObject *self, PyObject *arg) {
    char *buf;
    Py_ssize_t n;
    (void)self;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "response() takes bytes");
        return NULL;
    }
    if (PyBytes_AsStringAndSize(arg, &buf, &n) != 0) return NULL;
    return PyLong_FromLong(whole_response((const unsigned char *)buf, n));
}

static PyMethodDef methods[] = {
    {"response", response, METH_O,
     "The status of one whole plain HTTP/1.1 answer with a Content-Length body, or 0."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tailwise.loadgen.transport.http_c",
    "Compiled fast path of tailwise.loadgen.transport.http_conn.", -1, methods,
};

PyMODINIT_FUNC PyInit_http_c(void) { return PyModule_Create(&module); }
