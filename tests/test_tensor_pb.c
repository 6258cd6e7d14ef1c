/* TensorProto .pb files: every tensor file of the ONNX backend tests (libonnx-testdata) is read and
 * compared with python3-onnx's numpy view of the same file (numpy_helper.to_array, saved as .npy by
 * tests/pb_reference.py), written back and compared as protos by python; then bad input. */
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "testutil.h"

#define CORPUS "/usr/share/libonnx-testdata/data"

static void test_corpus(void) {
    char dir[4096], manifest[4096], pairs[4096], cmd[16384];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("pbref"));
    snprintf(manifest, sizeof manifest, "%s", tu_tmp_path("pbref.tsv"));
    snprintf(pairs, sizeof pairs, "%s", tu_tmp_path("pb_pairs.tsv"));
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/pb_reference.py' tensors-to-npy '%s' '%s' '%s'", OTTER_PYTHON,
             OTTER_SOURCE_DIR, CORPUS, dir, manifest);
    fflush(stdout);
    int rc = system(cmd);
    CHECK(rc == 0);
    if (rc != 0) return;
    FILE *mf = fopen(manifest, "r");
    FILE *pf = fopen(pairs, "w");
    CHECK(mf && pf);
    if (!mf || !pf) return;
    char line[16384];
    int n_tensor = 0, n_loaded = 0, n_match = 0, n_nonpy = 0, n_other = 0, n_other_refused = 0, n_rt = 0,
        n_rt_equal = 0, n_identical = 0;
    while (fgets(line, sizeof line, mf)) {
        line[strcspn(line, "\n")] = '\0';
        char *kind = strtok(line, "\t"), *pb = strtok(NULL, "\t"), *npy = strtok(NULL, "\t"), *dt = strtok(NULL, "\t");
        if (!kind || !pb || !npy || !dt) continue;
        otter_tensor *t = NULL;
        otter_status s = otter_tensor_load_pb(&t, pb);
        if (strcmp(kind, "other") == 0) {
            /* a SequenceProto/OptionalProto read as a TensorProto: must not crash; usually refused */
            n_other++;
            n_other_refused += s != OTTER_OK;
            otter_tensor_free(t);
            continue;
        }
        if (strcmp(kind, "tensor") == 0)
            n_tensor++;
        else
            n_nonpy++;
        if (s != OTTER_OK) {
            CHECK_OK(s);
            fprintf(stderr, "  %s (%s): %s\n", pb, dt, otter_last_error());
            continue;
        }
        n_loaded++;
        CHECK(strcmp(otter_dtype_name(t->dtype), "undefined") != 0);
        if (strcmp(kind, "tensor") == 0) {
            otter_tensor *ref = NULL;
            CHECK_OK(otter_tensor_load_npy(&ref, npy));
            bool same = ref && ref->dtype == t->dtype && ref->rank == t->rank;
            for (int i = 0; same && i < t->rank; i++) same = ref->dims[i] == t->dims[i];
            same = same && ref && otter_tensor_nbytes(ref) == otter_tensor_nbytes(t) &&
                   (otter_tensor_nbytes(t) == 0 || memcmp(ref->data, t->data, otter_tensor_nbytes(t)) == 0);
            CHECK(same);
            if (!same)
                fprintf(stderr, "  %s: otter %s rank %d differs from numpy's %s rank %d\n", pb,
                        otter_dtype_name(t->dtype), t->rank, ref ? otter_dtype_name(ref->dtype) : "?",
                        ref ? ref->rank : -1);
            n_match += same;
            otter_tensor_free(ref);
        }
        /* write it back and read it again */
        char out[4200];
        snprintf(out, sizeof out, "%s/rt_%d.pb", dir, n_rt);
        n_rt++;
        CHECK_OK(otter_tensor_save_pb(t, out));
        otter_tensor *u = NULL;
        CHECK_OK(otter_tensor_load_pb(&u, out));
        bool eq = u && otter_tensor_equal(t, u) && ((t->name == NULL) == (u->name == NULL)) &&
                  (!t->name || strcmp(t->name, u->name) == 0);
        CHECK(eq);
        n_rt_equal += eq;
        size_t na = 0, nb = 0;
        void *a = tu_read_file(pb, &na), *b = tu_read_file(out, &nb);
        n_identical += a && b && na == nb && memcmp(a, b, na) == 0;
        free(a);
        free(b);
        fprintf(pf, "%s\t%s\n", pb, out);
        otter_tensor_free(u);
        otter_tensor_free(t);
    }
    fclose(mf);
    fclose(pf);
    printf("backend-test .pb files: %d tensors numpy can hold, %d it cannot (string), %d loaded by otter\n", n_tensor,
           n_nonpy, n_loaded);
    printf("  %d of %d equal to numpy_helper.to_array (dtype, dims, every byte)\n", n_match, n_tensor);
    printf("  %d of %d saved and re-read equal (dtype, dims, data, name); %d byte-identical to the original file\n",
           n_rt_equal, n_rt, n_identical);
    printf("  %d non-tensor files (sequences, optionals): %d refused as TensorProto, none crashed\n", n_other,
           n_other_refused);
    CHECK(n_tensor > 3000 && n_match == n_tensor && n_loaded == n_tensor + n_nonpy && n_rt_equal == n_rt);
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/pb_reference.py' compare-tensors '%s'", OTTER_PYTHON, OTTER_SOURCE_DIR,
             pairs);
    fflush(stdout);
    rc = system(cmd);
    CHECK(rc == 0);
}

static size_t pack_tensor(const Onnx__TensorProto *p, uint8_t *buf) {
    size_t n = onnx__tensor_proto__get_packed_size(p);
    return onnx__tensor_proto__pack(p, buf) == n ? n : 0;
}

static void expect_bad(const char *label, const void *img, size_t n, const char *needle) {
    otter_tensor *t = (otter_tensor *)1;
    otter_status s = otter_tensor_load_pb_from_memory(&t, img, n);
    bool ok = s != OTTER_OK && t == NULL && strstr(otter_last_error(), needle) != NULL;
    CHECK(ok);
    printf("  %-34s -> %s: %s%s\n", label, otter_status_name(s), otter_last_error(), ok ? "" : "   <-- UNEXPECTED");
    if (s == OTTER_OK) otter_tensor_free(t);
}

static void test_bad_input(void) {
    printf("bad .pb input (each must fail and say why):\n");
    static uint8_t buf[4096];
    expect_bad("empty", "", 0, "empty");
    expect_bad("garbage bytes", "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11, "not a valid TensorProto");
    expect_bad("dims as fixed32 (wrong wire type)", "\x0d\x01\x02\x03\x04", 5, "field 1 has wire type 5, expected 0");
    expect_bad("raw_data length past the end", "\x08\x02\x10\x01\x4a\x10\x01\x02", 8, "says 16 bytes, only 2 left");
    expect_bad("wire type 7", "\x0f\x01", 2, "invalid wire type 7");
    expect_bad("truncated varint", "\x08\xff\xff", 3, "truncated varint");

    float vals[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {2, 3};
    Onnx__TensorProto p = ONNX__TENSOR_PROTO__INIT;
    p.name = "short_one";
    p.n_dims = 2;
    p.dims = dims;
    p.has_data_type = 1;
    p.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    p.has_raw_data = 1;
    p.raw_data.data = (uint8_t *)vals;
    p.raw_data.len = 20;
    size_t n = pack_tensor(&p, buf);
    expect_bad("raw_data 20 bytes for 2x3 float", buf, n, "short_one");

    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 16};
    p.name = "huge_one";
    p.dims = huge;
    p.n_dims = 3;
    p.raw_data.len = 24;
    n = pack_tensor(&p, buf);
    expect_bad("dims product overflows int64", buf, n, "huge_one");

    int64_t neg[2] = {2, -3};
    p.name = "negative_one";
    p.dims = neg;
    p.n_dims = 2;
    n = pack_tensor(&p, buf);
    expect_bad("negative dim", buf, n, "negative_one");

    p.name = "untyped_one";
    p.dims = dims;
    p.data_type = 0;
    p.raw_data.len = 24;
    n = pack_tensor(&p, buf);
    expect_bad("data_type UNDEFINED", buf, n, "untyped_one");
    p.data_type = 99;
    n = pack_tensor(&p, buf);
    expect_bad("data_type 99", buf, n, "untyped_one");

    /* external data: from memory there is no folder to read it from */
    Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *ext[1] = {&loc};
    loc.key = "location";
    loc.value = "missing.bin";
    p.name = "external_one";
    p.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    p.has_raw_data = 0;
    p.n_external_data = 1;
    p.external_data = ext;
    p.has_data_location = 1;
    p.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    n = pack_tensor(&p, buf);
    expect_bad("external data from memory", buf, n, "external_one");
    /* from a file: the side file is missing */
    remove(tu_tmp_path("missing.bin")); /* left by an earlier run */
    const char *path = tu_tmp_path("external_one.pb");
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    otter_tensor *t = NULL;
    otter_status s = otter_tensor_load_pb(&t, path);
    CHECK(s != OTTER_OK && t == NULL && strstr(otter_last_error(), "missing.bin"));
    printf("  %-34s -> %s: %s\n", "missing external-data file", otter_status_name(s), otter_last_error());
    /* now write the side file: it loads */
    f = fopen(tu_tmp_path("missing.bin"), "wb");
    fwrite(vals, 1, sizeof vals, f);
    fclose(f);
    CHECK_OK(otter_tensor_load_pb(&t, tu_tmp_path("external_one.pb")));
    CHECK(t && t->dtype == OTTER_DTYPE_FLOAT && t->rank == 2 && memcmp(t->data, vals, sizeof vals) == 0);
    printf("  %-34s -> %s\n", "external data present", t ? "loaded, values equal" : otter_last_error());
    otter_tensor_free(t);
    t = NULL;
    loc.value = "../missing.bin";
    n = pack_tensor(&p, buf);
    f = fopen(tu_tmp_path("escape.pb"), "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    s = otter_tensor_load_pb(&t, tu_tmp_path("escape.pb"));
    CHECK(s != OTTER_OK && t == NULL && strstr(otter_last_error(), "../missing.bin"));
    printf("  %-34s -> %s: %s\n", "location '../missing.bin'", otter_status_name(s), otter_last_error());

    /* Field number 0 written as an over-long key (0x80 0x00): protobuf-c accepts it as an unknown field;
     * otter must either refuse it or write something it can read back (python3-onnx refuses it). */
    {
        const uint8_t f0[] = {0x08, 0x02, 0x10, 0x01, 0x4a, 0x08, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 0x80, 0x00, 0x04};
        t = NULL;
        s = otter_tensor_load_pb_from_memory(&t, f0, sizeof f0);
        bool ok = s != OTTER_OK;
        char msg[1024];
        snprintf(msg, sizeof msg, "refused: %s", otter_last_error());
        if (s == OTTER_OK) {
            otter_tensor *u = NULL;
            ok = otter_tensor_save_pb(t, tu_tmp_path("field0.pb")) == OTTER_OK &&
                 otter_tensor_load_pb(&u, tu_tmp_path("field0.pb")) == OTTER_OK;
            snprintf(msg, sizeof msg, "accepted; saved copy %s%s",
                     ok ? "reloads" : "is refused: ", ok ? "" : otter_last_error());
            otter_tensor_free(u);
            otter_tensor_free(t);
        }
        CHECK(ok);
        printf("  %-34s -> %s\n", "field 0 as an over-long key", msg);
    }

    /* every strict prefix of a real file fails cleanly */
    size_t fsz = 0;
    uint8_t *file = tu_read_file(CORPUS "/node/test_abs/test_data_set_0/input_0.pb", &fsz);
    CHECK(file != NULL);
    size_t failed = 0;
    for (size_t len = 0; file && len < fsz; len++) {
        uint8_t *copy = malloc(len ? len : 1);
        memcpy(copy, file, len);
        t = NULL;
        s = otter_tensor_load_pb_from_memory(&t, copy, len);
        failed += s != OTTER_OK && t == NULL;
        if (s == OTTER_OK) otter_tensor_free(t);
        free(copy);
    }
    CHECK(file && failed == fsz);
    printf("  every strict prefix of test_abs input_0.pb (%zu lengths): %zu failed cleanly\n", fsz, failed);
    t = NULL;
    CHECK_OK(otter_tensor_load_pb_from_memory(&t, file, fsz));
    otter_tensor_free(t);
    free(file);
}

int main(void) {
    test_corpus();
    test_bad_input();
    return tu_finish("test_tensor_pb");
}
