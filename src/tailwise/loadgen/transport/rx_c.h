/* The stream reader (Linux): the sockets of live LLM streams read in C, many per wake-up.
 *
 * Included by sse_c.c, whose chunk_event() it uses. From its first request on, a stream
 * connection on a plain TCP socket hands its socket to one Reader (the event loop's
 * transport stops reading it: pause_reading; it still writes). The Reader is its own
 * epoll set, and the loop watches only the Reader's epoll descriptor: one wake-up of
 * the loop reads every stream socket that is ready, each read's arrival time taken
 * right after it returns (CLOCK_MONOTONIC, the clock of tailwise.clock.now_ns), with
 * no Python call per read.
 *
 * A connection is *armed* while its answer stands between two HTTP chunks, mid-answer
 * (http_stream.StreamConn decides, as for its own fast path). For an armed connection,
 * a read that is one whole HTTP chunk holding one plain content delta (chunk_event,
 * what sse_fast.chunk reads) is booked here: a non-empty content's time appended to the
 * answer's list of chunk times (its text to the text list where text is kept), its
 * bytes and time accumulated. Any other read is handed back to Python as it came, with
 * its time, and the connection is disarmed: (conn, data, t_ns, 0, nbytes, t_last), the
 * last two what was booked since the last hand-back; at most one such read per socket
 * per poll. When the peer has closed, what came before the close is read here all the
 * same, then the end is handed back, the socket leaving the set: (conn, None, t_ns, 0,
 * ...), and the loop's transport meets the end itself. A read that fails is handed back
 * with its errno: (conn, None, t_ns, errno, ...); a socket error epoll flags is handed
 * back unread, for the transport to meet. poll() returns the hand-backs after the whole
 * batch is read: no Python code runs while the batch's events are in hand.
 *
 * The set is edge-triggered: a socket is reported once per arrival, not again on every
 * poll until read, which spares the kernel a second look at each socket per chunk. A
 * ready socket is read until a short read (TCP: its queue is then empty).
 *
 * Bounded: at most RX_READS_PER_POLL reads of RX_READ_BYTES per socket per poll (then
 * the socket is re-armed, so epoll reports it again), at most RX_EVENTS sockets per
 * poll (the rest stay queued in epoll), file descriptors below RX_MAX_FD, at most
 * max_chunks chunk times per answer (past it, Python reads and fails the answer).
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RX_READ_BYTES 65536
#define RX_EVENTS 256
#define RX_READS_PER_POLL 8
#define RX_MAX_FD (1 << 20)

typedef struct {
    PyObject *conn;   /* strong; NULL: the descriptor is not in the set */
    PyObject *chunks; /* strong while armed: the answer's list of chunk times */
    PyObject *text;   /* strong while armed and text is kept, else NULL */
    long long nbytes; /* booked here since the last hand-back */
    long long t_last; /* the latest booked read's time */
    Py_ssize_t max_chunks;
} rx_slot;

typedef struct {
    PyObject_HEAD
    int epfd;
    rx_slot *slots; /* indexed by descriptor */
    int nslots;
    long long t0;
    unsigned char *buf;
} Reader;

static long long rx_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* What the set watches of a socket: arrivals and the peer's close, edge-triggered. */
static struct epoll_event rx_watch(int fd) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    ev.data.fd = fd;
    return ev;
}

static void rx_disarm(rx_slot *s) {
    Py_CLEAR(s->chunks);
    Py_CLEAR(s->text);
}

static void rx_drop(Reader *r, int fd) {
    rx_slot *s = &r->slots[fd];
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL); /* ENOENT/EBADF after a close: fine */
    rx_disarm(s);
    Py_CLEAR(s->conn);
    s->nbytes = 0;
}

static int rx_fd_arg(Reader *r, PyObject *arg, int need_slot) {
    long fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred()) return -1;
    if (fd < 0 || fd >= RX_MAX_FD) {
        PyErr_Format(PyExc_ValueError, "descriptor %ld out of range", fd);
        return -1;
    }
    if (need_slot && (fd >= r->nslots || r->slots[fd].conn == NULL)) {
        PyErr_Format(PyExc_KeyError, "descriptor %ld is not read here", fd);
        return -1;
    }
    return (int)fd;
}

static PyObject *Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || !PyArg_ParseTuple(args, ":Reader"))
        return PyErr_Format(PyExc_TypeError, "Reader() takes no arguments");
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r == NULL) return NULL;
    r->epfd = -1;
    r->buf = PyMem_Malloc(RX_READ_BYTES);
    if (r->buf == NULL) {
        Py_DECREF(r);
        return PyErr_NoMemory();
    }
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static int Reader_traverse(Reader *r, visitproc visit, void *arg) {
    for (int i = 0; i < r->nslots; i++) {
        Py_VISIT(r->slots[i].conn);
        Py_VISIT(r->slots[i].chunks);
        Py_VISIT(r->slots[i].text);
    }
    return 0;
}

static int Reader_clear(Reader *r) {
    for (int i = 0; i < r->nslots; i++) {
        rx_disarm(&r->slots[i]);
        Py_CLEAR(r->slots[i].conn);
    }
    return 0;
}

static void Reader_dealloc(Reader *r) {
    PyObject_GC_UnTrack(r);
    Reader_clear(r);
    if (r->epfd >= 0) close(r->epfd);
    PyMem_Free(r->slots);
    PyMem_Free(r->buf);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Reader_fileno(Reader *r, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(r->epfd);
}

static PyObject *Reader_close(Reader *r, PyObject *unused) {
    (void)unused;
    Reader_clear(r);
    if (r->epfd >= 0) close(r->epfd);
    r->epfd = -1;
    Py_RETURN_NONE;
}

/* set_origin(t0_ns): times are t - t0, as the transport's (Pool.t0). */
static PyObject *Reader_set_origin(Reader *r, PyObject *arg) {
    long long t0 = PyLong_AsLongLong(arg);
    if (t0 == -1 && PyErr_Occurred()) return NULL;
    r->t0 = t0;
    Py_RETURN_NONE;
}

/* add(fd, conn): read ``fd`` here from now on, on behalf of ``conn``. */
static PyObject *Reader_add(Reader *r, PyObject *args) {
    PyObject *fdobj, *conn;
    if (r->epfd < 0) return PyErr_Format(PyExc_ValueError, "the reader is closed");
    if (!PyArg_ParseTuple(args, "OO:add", &fdobj, &conn)) return NULL;
    int fd = rx_fd_arg(r, fdobj, 0);
    if (fd < 0) return NULL;
    if (fd >= r->nslots) {
        int n = r->nslots ? r->nslots : 256;
        while (n <= fd) n *= 2;
        rx_slot *grown = PyMem_Realloc(r->slots, (size_t)n * sizeof(rx_slot));
        if (grown == NULL) return PyErr_NoMemory();
        memset(grown + r->nslots, 0, (size_t)(n - r->nslots) * sizeof(rx_slot));
        r->slots = grown;
        r->nslots = n;
    }
    /* A descriptor number comes back after a close (which left the epoll set by itself):
     * whatever the slot held belongs to a connection that is gone. */
    rx_drop(r, fd);
    struct epoll_event ev = rx_watch(fd);
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_INCREF(conn);
    r->slots[fd].conn = conn;
    Py_RETURN_NONE;
}

static PyObject *rx_pending(rx_slot *s) {
    PyObject *pair = Py_BuildValue("(LL)", s->nbytes, s->t_last);
    s->nbytes = 0;
    return pair;
}

/* remove(fd) -> (nbytes, t_last): stop reading ``fd``; what was booked since the last
 * hand-back; (0, 0) for a descriptor no longer read here (handed back, reader closed). */
static PyObject *Reader_remove(Reader *r, PyObject *arg) {
    int fd = rx_fd_arg(r, arg, 0);
    if (fd < 0) return NULL;
    if (fd >= r->nslots || r->slots[fd].conn == NULL) return Py_BuildValue("(ii)", 0, 0);
    PyObject *pair = rx_pending(&r->slots[fd]);
    if (pair != NULL) rx_drop(r, fd);
    return pair;
}

/* arm(fd, chunks, text, max_chunks): book whole plain content chunks of ``fd`` into
 * ``chunks`` (and their text into ``text`` unless None) while it holds < max_chunks. */
static PyObject *Reader_arm(Reader *r, PyObject *args) {
    PyObject *fdobj, *chunks, *text;
    Py_ssize_t max_chunks;
    if (!PyArg_ParseTuple(args, "OO!On:arm", &fdobj, &PyList_Type, &chunks, &text, &max_chunks))
        return NULL;
    if (text != Py_None && !PyList_Check(text))
        return PyErr_Format(PyExc_TypeError, "arm() takes a list or None as text");
    int fd = rx_fd_arg(r, fdobj, 1);
    if (fd < 0) return NULL;
    rx_slot *s = &r->slots[fd];
    rx_disarm(s);
    Py_INCREF(chunks);
    s->chunks = chunks;
    if (text != Py_None) {
        Py_INCREF(text);
        s->text = text;
    }
    s->max_chunks = max_chunks;
    Py_RETURN_NONE;
}

/* Books one read of an armed slot if it is one whole plain content chunk: 1 booked,
 * 0 not that shape (hand it back), -1 error. */
static int rx_book(rx_slot *s, const unsigned char *b, Py_ssize_t n, long long t) {
    scan sc;
    if (PyList_GET_SIZE(s->chunks) >= s->max_chunks || chunk_event(b, n, &sc) != 0) return 0;
    if (sc.content_len > 0) { /* an empty content is no token: only its bytes and time */
        PyObject *text = NULL; /* decoded only where the text is kept */
        if (s->text != NULL && (text = text_of(sc.content, sc.content_len)) == NULL)
            return 0; /* not reached (the scan checked the UTF-8): Python reads it */
        PyObject *at = PyLong_FromLongLong(t);
        int rc = at == NULL ? -1 : PyList_Append(s->chunks, at);
        Py_XDECREF(at);
        if (rc == 0 && text != NULL) rc = PyList_Append(s->text, text);
        Py_XDECREF(text);
        if (rc != 0) return -1;
    }
    s->nbytes += n;
    s->t_last = t;
    return 1;
}

static int rx_hand_back(PyObject **out, rx_slot *s, PyObject *data, long long t, int err) {
    if (*out == NULL && (*out = PyList_New(0)) == NULL) return -1;
    PyObject *item = Py_BuildValue("(OOLiLL)", s->conn, data, t, err, s->nbytes, s->t_last);
    if (item == NULL) return -1;
    s->nbytes = 0;
    int rc = PyList_Append(*out, item);
    Py_DECREF(item);
    return rc;
}

static void rx_rearm(Reader *r, int fd) {
    struct epoll_event ev = rx_watch(fd);
    epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &ev); /* still ready: epoll reports it again */
}

/* The socket's end (EOF, an error, or an error epoll flagged, unread): handed back, the
 * socket out of the set. -1 (the slot as it was) when the hand-back cannot be built. */
static int rx_end(Reader *r, int fd, rx_slot *s, PyObject **out, long long t, int err) {
    if (rx_hand_back(out, s, Py_None, t, err) != 0) return -1;
    rx_disarm(s);
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
    Py_CLEAR(s->conn);
    return 0;
}

/* Reads a ready socket (edge-triggered). At most one read per socket per poll goes back
 * to Python, whose state moves on it: a second waits for the next poll (the socket is
 * re-armed, so epoll reports it again). Otherwise it reads until a short read (TCP: the
 * queue is then empty) or, once the peer has closed (``ending``), to the end, so that
 * the data that came with the close is read and timed here as it would have been. */
static int rx_read_ready(Reader *r, int fd, rx_slot *s, PyObject **out, int ending) {
    for (int reads = 0; reads < RX_READS_PER_POLL; reads++) {
        /* recv, not read: the same bytes without the VFS layer's read path, about 0.3 µs
         * (4%) less per chunk on loopback (benchmarks/floor_client.c, pairs of runs). */
        ssize_t got = recv(fd, r->buf, RX_READ_BYTES, 0);
        long long t = rx_now_ns() - r->t0;
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return ending ? rx_end(r, fd, s, out, t, 0) : 0;
            return rx_end(r, fd, s, out, t, errno);
        }
        if (got == 0) return rx_end(r, fd, s, out, t, 0); /* the end of the stream */
        int booked = 0;
        if (s->chunks != NULL && (booked = rx_book(s, r->buf, got, t)) < 0) return -1;
        if (!booked) {
            PyObject *data = PyBytes_FromStringAndSize((const char *)r->buf, got);
            if (data == NULL) return -1;
            int rc = rx_hand_back(out, s, data, t, 0);
            Py_DECREF(data);
            if (rc != 0) return -1;
            rx_disarm(s);
            if (ending || got == RX_READ_BYTES) rx_rearm(r, fd);
            return 0;
        }
        if (got < RX_READ_BYTES && !ending) return 0;
    }
    rx_rearm(r, fd);
    return 0;
}

/* poll() -> list[(conn, bytes | None, t_ns, errno, nbytes, t_last)] | None: every ready
 * socket read (see rx_read_ready). Out of memory while reading one socket, that
 * connection ends with ENOMEM and the others go on. */
static PyObject *Reader_poll(Reader *r, PyObject *unused) {
    (void)unused;
    struct epoll_event events[RX_EVENTS];
    if (r->epfd < 0) Py_RETURN_NONE;
    int n = epoll_wait(r->epfd, events, RX_EVENTS, 0);
    if (n < 0) {
        if (errno == EINTR) Py_RETURN_NONE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *out = NULL;
    for (int i = 0; i < n; i++) {
        int fd = events[i].data.fd;
        if (fd < 0 || fd >= r->nslots || r->slots[fd].conn == NULL) continue;
        rx_slot *s = &r->slots[fd];
        uint32_t flags = events[i].events;
        int rc;
        if (flags & EPOLLERR) /* unread: the loop's transport meets the error */
            rc = rx_end(r, fd, s, &out, rx_now_ns() - r->t0, 0);
        else
            rc = rx_read_ready(r, fd, s, &out, (flags & (EPOLLHUP | EPOLLRDHUP)) != 0);
        if (rc == 0) continue;
        PyErr_Clear();
        if (r->slots[fd].conn == NULL || rx_end(r, fd, s, &out, rx_now_ns() - r->t0, ENOMEM) == 0)
            continue;
        /* Not even that: what was read goes back, the rest waits for the next poll. */
        PyErr_Clear();
        for (int k = i; k < n; k++) rx_rearm(r, events[k].data.fd);
        if (out == NULL) return PyErr_NoMemory();
        return out;
    }
    if (out == NULL) Py_RETURN_NONE;
    return out;
}

static PyMethodDef Reader_methods[] = {
    {"fileno", (PyCFunction)Reader_fileno, METH_NOARGS, "The reader's epoll descriptor."},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "Let go of every socket; close."},
    {"set_origin", (PyCFunction)Reader_set_origin, METH_O, "Times are t - t0_ns from now."},
    {"add", (PyCFunction)Reader_add, METH_VARARGS, "add(fd, conn): read fd here."},
    {"remove", (PyCFunction)Reader_remove, METH_O, "remove(fd) -> (nbytes, t_last)."},
    {"arm", (PyCFunction)Reader_arm, METH_VARARGS,
     "arm(fd, chunks, text, max_chunks): book whole plain content chunks here."},
    {"poll", (PyCFunction)Reader_poll, METH_NOARGS,
     "Read every ready socket once: the reads to hand back, or None."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tailwise.loadgen.transport.sse_c.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The stream sockets of a transport, read in C (see rx_c.h).",
    .tp_new = Reader_new,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_traverse = (traverseproc)Reader_traverse,
    .tp_clear = (inquiry)Reader_clear,
    .tp_methods = Reader_methods,
};

static int add_reader_type(PyObject *m) {
    if (PyType_Ready(&ReaderType) != 0) return -1;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) != 0) {
        Py_DECREF(&ReaderType);
        return -1;
    }
    return 0;
}
