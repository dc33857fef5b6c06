/* The compiled formatter of the records writer (tailwise.loadgen.execute.writer): frames to JSON Lines.
 *
 * rows(ints, rows, width, n_values, fields, kinds, lo, hi) -> str
 *
 * ``ints`` is a frame's integers (native int64, the writer checks the byte order): an
 * int64[width, rows] matrix, one row of the matrix per column of the records, then
 * int64[rows] chunk counts, then int64[n_values] chunk times. ``fields`` says what each
 * record holds, in order: tuples (prefix: bytes, op: int, row: int), the prefix being the
 * text before the value (``{"seq":``, ``,"parent":``, ...) and op one of
 *
 *   0  the integer at matrix[row] (negative: ``null``),
 *   1  the error kind of the code at matrix[row], from ``kinds`` (JSON strings, bytes),
 *   2  the chunk times (``[t,t,...]``, or ``null`` for a count of 0),
 *   3  whether matrix[row] (the scheduled instant) lies in [lo, hi) (``true``/``false``),
 *   4  whether matrix[row] is nonzero (``true``/``false``).
 *
 * Each record ends with ``}\n``. The text is the same, byte for byte, as
 * tailwise.records.format_rows (tests/loadgen/test_writer_c.py checks it on generated
 * frames). A frame that does not add up (a count below zero, counts that do not sum to
 * n_values, an error code outside ``kinds``, a buffer too short) raises ValueError and the
 * caller formats it in Python. Memory: one buffer sized from the frame before writing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define INT_CHARS 20 /* "-9223372036854775808" */

typedef struct {
    const char *prefix;
    Py_ssize_t prefix_len;
    long op;
    Py_ssize_t row;
} Field;

static int64_t at(const char *base, Py_ssize_t index) {
    int64_t v;
    memcpy(&v, base + 8 * index, 8); /* the frame's integers need not be aligned */
    return v;
}

/* Decimal text of v at out; returns the length. */
static Py_ssize_t put_int(char *out, int64_t v) {
    char tmp[INT_CHARS];
    Py_ssize_t n = 0, len = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) out[len++] = '-';
    while (n) out[len++] = tmp[--n];
    return len;
}

static Py_ssize_t put(char *out, const char *s, Py_ssize_t n) {
    memcpy(out, s, (size_t)n);
    return n;
}

static PyObject *rows(PyObject *self, PyObject *args) {
    Py_buffer ints;
    Py_ssize_t n_rows, width, n_values, n_fields, n_kinds, kind_max = 0, bound, pos = 0;
    PyObject *fields_obj, *kinds_obj, *result = NULL;
    long long lo, hi;
    Field *fields = NULL;
    const char **kind_text = NULL;
    Py_ssize_t *kind_len = NULL;
    char *out = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnO!O!LL", &ints, &n_rows, &width, &n_values, &PyTuple_Type,
                          &fields_obj, &PyTuple_Type, &kinds_obj, &lo, &hi))
        return NULL;
    n_fields = PyTuple_GET_SIZE(fields_obj);
    n_kinds = PyTuple_GET_SIZE(kinds_obj);
    if (n_rows < 0 || width < 1 || n_values < 0 || n_rows > PY_SSIZE_T_MAX / 64 / (width + 1) ||
        n_values > PY_SSIZE_T_MAX / 64 || ints.len < 8 * (n_rows * (width + 1) + n_values)) {
        PyErr_SetString(PyExc_ValueError, "frame: sizes do not match its bytes");
        goto done;
    }
    fields = PyMem_Calloc((size_t)n_fields + 1, sizeof(Field));
    kind_text = PyMem_Calloc((size_t)n_kinds + 1, sizeof(char *));
    kind_len = PyMem_Calloc((size_t)n_kinds + 1, sizeof(Py_ssize_t));
    if (!fields || !kind_text || !kind_len) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n_kinds; k++) {
        PyObject *kind = PyTuple_GET_ITEM(kinds_obj, k);
        if (!PyBytes_Check(kind)) {
            PyErr_SetString(PyExc_TypeError, "kinds: bytes");
            goto done;
        }
        kind_text[k] = PyBytes_AS_STRING(kind);
        kind_len[k] = PyBytes_GET_SIZE(kind);
        if (kind_len[k] > kind_max) kind_max = kind_len[k];
    }
    /* Upper bound of the text: per record, every prefix and its widest value. */
    bound = 2;
    for (Py_ssize_t f = 0; f < n_fields; f++) {
        PyObject *spec = PyTuple_GET_ITEM(fields_obj, f), *prefix;
        Field *fd = &fields[f];
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
            PyErr_SetString(PyExc_TypeError, "fields: (prefix, op, row) tuples");
            goto done;
        }
        prefix = PyTuple_GET_ITEM(spec, 0);
        if (!PyBytes_Check(prefix)) {
            PyErr_SetString(PyExc_TypeError, "fields: prefix bytes");
            goto done;
        }
        fd->prefix = PyBytes_AS_STRING(prefix);
        fd->prefix_len = PyBytes_GET_SIZE(prefix);
        fd->op = PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
        fd->row = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 2));
        if (PyErr_Occurred()) goto done;
        if (fd->op < 0 || fd->op > 4 || fd->row < 0 || fd->row >= width) {
            PyErr_SetString(PyExc_ValueError, "fields: op 0-4, row inside the matrix");
            goto done;
        }
        bound += fd->prefix_len + (fd->op == 1 ? kind_max : INT_CHARS) + 2;
    }
    {
        const char *base = (const char *)ints.buf;
        const char *counts = base + 8 * n_rows * width, *values = counts + 8 * n_rows;
        Py_ssize_t next = 0;
        for (Py_ssize_t r = 0; r < n_rows; r++) {
            int64_t c = at(counts, r);
            if (c < 0 || c > n_values - next) {
                PyErr_SetString(PyExc_ValueError, "frame: chunk counts do not add up");
                goto done;
            }
            next += (Py_ssize_t)c;
        }
        if (next != n_values) {
            PyErr_SetString(PyExc_ValueError, "frame: chunk counts do not add up");
            goto done;
        }
        if (bound > (PY_SSIZE_T_MAX - n_values * (INT_CHARS + 1)) / (n_rows + 1)) {
            PyErr_NoMemory();
            goto done;
        }
        bound = bound * n_rows + n_values * (INT_CHARS + 1) + 1;
        out = PyMem_Malloc((size_t)bound);
        if (!out) {
            PyErr_NoMemory();
            goto done;
        }
        next = 0;
        for (Py_ssize_t r = 0; r < n_rows; r++) {
            for (Py_ssize_t f = 0; f < n_fields; f++) {
                const Field *fd = &fields[f];
                int64_t v = at(base, fd->row * n_rows + r);
                pos += put(out + pos, fd->prefix, fd->prefix_len);
                switch (fd->op) {
                case 0:
                    pos += v < 0 ? put(out + pos, "null", 4) : put_int(out + pos, v);
                    break;
                case 1:
                    if (v < 0 || v >= n_kinds) {
                        PyErr_SetString(PyExc_ValueError, "frame: error code outside the kinds");
                        goto done;
                    }
                    pos += put(out + pos, kind_text[v], kind_len[v]);
                    break;
                case 2: {
                    int64_t c = at(counts, r);
                    if (c == 0) {
                        pos += put(out + pos, "null", 4);
                        break;
                    }
                    out[pos++] = '[';
                    for (int64_t k = 0; k < c; k++) {
                        if (k) out[pos++] = ',';
                        pos += put_int(out + pos, at(values, next + k));
                    }
                    out[pos++] = ']';
                    next += (Py_ssize_t)c;
                    break;
                }
                case 3:
                    pos += v >= lo && v < hi ? put(out + pos, "true", 4) : put(out + pos, "false", 5);
                    break;
                default:
                    pos += v != 0 ? put(out + pos, "true", 4) : put(out + pos, "false", 5);
                }
            }
            pos += put(out + pos, "}\n", 2);
        }
    }
    result = PyUnicode_DecodeASCII(out, pos, NULL);
done:
    PyMem_Free(out);
    PyMem_Free(fields);
    PyMem_Free(kind_text);
    PyMem_Free(kind_len);
    PyBuffer_Release(&ints);
    return result;
}

static PyMethodDef methods[] = {
    {"rows", rows, METH_VARARGS, "JSON Lines of one records frame (see the module's comment)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tailwise.loadgen.execute.writer_c",
    "Compiled formatter of tailwise.loadgen.execute.writer.", -1, methods,
};

PyMODINIT_FUNC PyInit_writer_c(void) { return PyModule_Create(&module); }
