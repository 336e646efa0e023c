/* video_decode.c: containers and codecs through FFmpeg's libav* (see video.h).
 *
 * One source at a time: a path, or bytes in memory read through a custom
 * AVIOContext (read + seek over the buffer, never past its end).  The first
 * "best" video stream is decoded; audio, subtitles and data are discarded at
 * the demuxer.  Invariants:
 *  - the frame size comes from the header and is checked against
 *    max_frame_pixels before a decoder is opened; the frame count (nb_frames,
 *    else the video packets counted by demuxing, no decoding) against
 *    max_total_frames;
 *  - frames are numbered in presentation order as the decoder returns them;
 *    after a seek the number comes from the frame's timestamp (constant frame
 *    rate), and a seek that lands past its target falls back to decoding from
 *    the start, so the sampled frames are always the right ones;
 *  - a seek happens only where the stream's index has a keyframe after the
 *    current position and at or before the next sampled frame (else where the
 *    gap exceeds seek_gap frames without an index), each for a later frame than
 *    the one before (an index of decode timestamps can promise a keyframe the
 *    seek does not reach: the frames are then decoded up to the target);
 *  - only sampled frames are converted to RGB (swscale, the frame's own
 *    colorspace and range), turned by the display matrix (multiples of 90
 *    degrees), and handed to the caller's sink at once;
 *  - iris_video_prepare's sink pushes each into the clip's own work queue
 *    (base/workq.h): a displayed frame is copied into a free slot and one of
 *    the queue's resize threads resizes it into its place, so decoding overlaps
 *    the resizes (the same bytes as one frame at a time).  As many threads as
 *    the worker pool has, twice as many slots, half of them at most
 *    HALF_RING_BYTES.  Not the worker pool: a frame's resize takes
 *    milliseconds, and the pool runs one caller's job at a time, so the CPU
 *    backend's ops and other requests' preprocessing would wait behind each
 *    round of resizes; the prepare takes the pool only for the content keys
 *    at its end.  A failed resize stops the decoding at the next frame
 *    handed over (or fails the close), with the first failed resize's
 *    message;
 *  - the wall-clock budget is checked by the demuxer's interrupt callback and
 *    between frames.
 * Without libav at build time (IRIS_VIDEO undefined) every entry point fails
 * with "built without video support". */
#include "video_internal.h"
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#if IRIS_VIDEO

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
#include <math.h>
#include <time.h>

#include "pool.h"
#include "workq.h"

int iris_video_supported(void) { return 1; }

typedef struct memsrc {
    const uint8_t *data;
    size_t n, pos;
} memsrc;

static int mem_read(void *opaque, uint8_t *buf, int size) {
    memsrc *m = opaque;
    if (m->pos >= m->n) return AVERROR_EOF;
    size_t k = m->n - m->pos < (size_t)size ? m->n - m->pos : (size_t)size;
    memcpy(buf, m->data + m->pos, k);
    m->pos += k;
    return (int)k;
}

static int64_t mem_seek(void *opaque, int64_t off, int whence) {
    memsrc *m = opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE: return (int64_t)m->n;
    case SEEK_SET: base = 0; break;
    case SEEK_CUR: base = (int64_t)m->pos; break;
    case SEEK_END: base = (int64_t)m->n; break;
    default: return AVERROR(EINVAL);
    }
    if (off > (int64_t)m->n || base + off < 0 || base + off > (int64_t)m->n) return AVERROR(EINVAL);
    m->pos = (size_t)(base + off);
    return (int64_t)m->pos;
}

typedef struct vsrc {
    const char *label;
    AVFormatContext *fmt;
    AVIOContext *avio;
    memsrc mem;
    AVCodecContext *dec;
    AVStream *st;
    AVFrame *frame;
    AVPacket *pkt;
    struct SwsContext *sws;
    uint8_t *rgb, *turned;   /* stored-orientation RGB, displayed RGB */
    int sw, sh;              /* stored size */
    iris_video_info info;
    int64_t start_pts;
    double deadline;         /* 0: none */
    double budget;           /* max_decode_seconds, for the message */
    int eof_sent;
} vsrc;

static int interrupted(void *opaque) {
    const vsrc *s = opaque;
    return s->deadline > 0 && iris_now_s() > s->deadline;
}

static void src_close(vsrc *s) {
    av_frame_free(&s->frame);
    av_packet_free(&s->pkt);
    avcodec_free_context(&s->dec);
    if (s->fmt) avformat_close_input(&s->fmt);
    if (s->avio) {
        av_freep(&s->avio->buffer);
        avio_context_free(&s->avio);
    }
    sws_freeContext(s->sws);
    free(s->rgb);
    free(s->turned);
    memset(s, 0, sizeof *s);
}

static int av_fail(vsrc *s, int code, int averr, const char *what, iris_err *err) {
    char msg[AV_ERROR_MAX_STRING_SIZE] = {0};
    av_strerror(averr, msg, sizeof msg);
    if (averr == AVERROR_EXIT || interrupted(s))
        return iris_err_set(err, IRIS_ELIMIT, "%s: decoding took longer than the budget of %.0f s", s->label,
                            s->budget);
    return iris_err_set(err, code, "%s: %s (%s)", s->label, what, msg);
}

/* The display matrix's counterclockwise rotation, to the nearest multiple of 90. */
static int stream_rotation(const AVStream *st) {
    const uint8_t *sd = NULL;
#if LIBAVFORMAT_VERSION_MAJOR >= 61
    const AVPacketSideData *p = av_packet_side_data_get(st->codecpar->coded_side_data,
                                                        st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    if (p && p->size >= 36) sd = p->data;
#else
    size_t size = 0;
    sd = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (size < 36) sd = NULL;
#endif
    if (!sd) return 0;
    double theta = av_display_rotation_get((const int32_t *)sd);
    if (isnan(theta)) return 0;
    long r = lround(theta / 90.0) * 90;
    return (int)(((r % 360) + 360) % 360);
}

/* Video packets counted by demuxing (no decoding), then back to the start. */
static int count_frames(vsrc *s, const iris_video_opts *o, int64_t *n, iris_err *err) {
    int64_t k = 0;
    int rc;
    while ((rc = av_read_frame(s->fmt, s->pkt)) >= 0) {
        if (s->pkt->stream_index == s->st->index) k++;
        av_packet_unref(s->pkt);
        if (k > o->max_total_frames)
            return iris_err_set(err, IRIS_ELIMIT, "%s: more than %lld frames, over the limit", s->label,
                                (long long)o->max_total_frames);
    }
    if (rc != AVERROR_EOF) return av_fail(s, IRIS_EFORMAT, rc, "reading the container failed", err);
    *n = k;
    rc = av_seek_frame(s->fmt, s->st->index, s->start_pts, AVSEEK_FLAG_BACKWARD);
    if (rc < 0) rc = avformat_seek_file(s->fmt, s->st->index, INT64_MIN, s->start_pts, s->start_pts, 0);
    if (rc < 0) return av_fail(s, IRIS_EFORMAT, rc, "seeking back to the start failed", err);
    return 0;
}

static int src_open(vsrc *s, const char *path, const void *data, size_t n, const char *label,
                    const iris_video_opts *o, int open_decoder, iris_err *err) {
    memset(s, 0, sizeof *s);
    s->label = label ? label : path ? path : "video";
    if ((path != NULL) == (data != NULL))
        return iris_err_set(err, IRIS_EINVAL, "%s: give exactly one of a path and bytes", s->label);
    if (data && n == 0) return iris_err_set(err, IRIS_EFORMAT, "%s: the video is empty (0 bytes)", s->label);
    if (o->max_decode_seconds > 0) s->deadline = iris_now_s() + o->max_decode_seconds, s->budget = o->max_decode_seconds;
    av_log_set_level(AV_LOG_QUIET);
    if (!(s->fmt = avformat_alloc_context()) || !(s->pkt = av_packet_alloc()) || !(s->frame = av_frame_alloc()))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    s->fmt->interrupt_callback.callback = interrupted;
    s->fmt->interrupt_callback.opaque = s;
    if (data) {
        s->mem = (memsrc){.data = data, .n = n};
        uint8_t *buf = av_malloc(1 << 16);
        if (!buf || !(s->avio = avio_alloc_context(buf, 1 << 16, 0, &s->mem, mem_read, NULL, mem_seek))) {
            av_free(buf);
            return iris_err_set(err, IRIS_ENOMEM, "out of memory");
        }
        s->fmt->pb = s->avio;
        s->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    }
    int rc = avformat_open_input(&s->fmt, data ? NULL : path, NULL, NULL);
    if (rc < 0) return av_fail(s, IRIS_EFORMAT, rc, "not a video file this build can read", err);
    if ((rc = avformat_find_stream_info(s->fmt, NULL)) < 0)
        return av_fail(s, IRIS_EFORMAT, rc, "the container's streams cannot be read", err);
    const AVCodec *codec = NULL;
    rc = av_find_best_stream(s->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (rc == AVERROR_STREAM_NOT_FOUND)
        return iris_err_set(err, IRIS_EFORMAT, "%s: the file has no video stream (audio only?)", s->label);
    if (rc == AVERROR_DECODER_NOT_FOUND || (rc >= 0 && !codec))
        return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: the video codec is not supported by this build's FFmpeg",
                            s->label);
    if (rc < 0) return av_fail(s, IRIS_EFORMAT, rc, "no usable video stream", err);
    s->st = s->fmt->streams[rc];
    for (unsigned i = 0; i < s->fmt->nb_streams; i++)
        if ((int)i != rc) s->fmt->streams[i]->discard = AVDISCARD_ALL;
    const AVCodecParameters *cp = s->st->codecpar;
    s->sw = cp->width, s->sh = cp->height;
    if (s->sw <= 0 || s->sh <= 0)
        return iris_err_set(err, IRIS_EFORMAT, "%s: the video stream has no frame size", s->label);
    if ((int64_t)s->sw * s->sh > o->max_frame_pixels)
        return iris_err_set(err, IRIS_ELIMIT, "%s: frames of %dx%d (%lld pixels) are over the limit of %lld pixels "
                            "a frame: scale the video down first", s->label, s->sw, s->sh,
                            (long long)s->sw * s->sh, (long long)o->max_frame_pixels);
    iris_video_info *in = &s->info;
    snprintf(in->codec, sizeof in->codec, "%s", avcodec_get_name(cp->codec_id));
    in->rotation = stream_rotation(s->st);
    int turn = in->rotation == 90 || in->rotation == 270;
    in->width = turn ? s->sh : s->sw, in->height = turn ? s->sw : s->sh;
    AVRational fr = s->st->avg_frame_rate.num > 0 && s->st->avg_frame_rate.den > 0 ? s->st->avg_frame_rate
                                                                                       : s->st->r_frame_rate;
    in->fps = fr.num > 0 && fr.den > 0 ? av_q2d(fr) : 0.0;
    s->start_pts = s->st->start_time != AV_NOPTS_VALUE ? s->st->start_time : 0;
    if (s->st->nb_frames > 0) in->n_frames = s->st->nb_frames;
    else if ((rc = count_frames(s, o, &in->n_frames, err))) return rc;
    if (in->n_frames > o->max_total_frames)
        return iris_err_set(err, IRIS_ELIMIT, "%s: %lld frames are over the limit of %lld", s->label,
                            (long long)in->n_frames, (long long)o->max_total_frames);
    if (in->n_frames <= 0) return iris_err_set(err, IRIS_EFORMAT, "%s: the video stream has no frames", s->label);
    if (!(in->fps > 0)) {
        double dur = s->fmt->duration > 0 ? (double)s->fmt->duration / AV_TIME_BASE : 0;
        in->fps = dur > 0 ? (double)in->n_frames / dur : 24.0;
    }
    if (!open_decoder) return 0;
    if (!(s->dec = avcodec_alloc_context3(codec))) return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    if ((rc = avcodec_parameters_to_context(s->dec, cp)) < 0)
        return av_fail(s, IRIS_EFORMAT, rc, "bad codec parameters", err);
    s->dec->thread_count = 0;
    if ((rc = avcodec_open2(s->dec, codec, NULL)) < 0)
        return av_fail(s, IRIS_EUNSUPPORTED, rc, "the decoder cannot open this stream", err);
    size_t bytes = (size_t)s->sw * s->sh * 3;
    if (!(s->rgb = malloc(bytes)) || (in->rotation && !(s->turned = malloc(bytes))))
        return iris_err_set(err, IRIS_ENOMEM, "out of memory");
    return 0;
}

/* The next decoded frame into s->frame: 1, or 0 at the end of the stream. */
static int next_frame(vsrc *s, iris_err *err) {
    for (;;) {
        if (s->deadline > 0 && iris_now_s() > s->deadline) return av_fail(s, IRIS_ELIMIT, AVERROR_EXIT, "", err);
        int rc = avcodec_receive_frame(s->dec, s->frame);
        if (rc >= 0) return 1;
        if (rc == AVERROR_EOF) return 0;
        if (rc != AVERROR(EAGAIN)) return av_fail(s, IRIS_EFORMAT, rc, "the video data is corrupt", err);
        if (s->eof_sent) return 0;
        rc = av_read_frame(s->fmt, s->pkt);
        if (rc == AVERROR_EOF || rc == AVERROR(EIO) || rc == AVERROR_INVALIDDATA) {
            s->eof_sent = 1;
            avcodec_send_packet(s->dec, NULL);
            continue;
        }
        if (rc < 0) return av_fail(s, IRIS_EFORMAT, rc, "reading the container failed", err);
        if (s->pkt->stream_index == s->st->index) {
            rc = avcodec_send_packet(s->dec, s->pkt);
            /* a damaged packet is skipped, as players do; the frame count catches what is lost */
            if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_INVALIDDATA) {
                av_packet_unref(s->pkt);
                return av_fail(s, IRIS_EFORMAT, rc, "the video data is corrupt", err);
            }
        }
        av_packet_unref(s->pkt);
    }
}

/* The current frame as displayed RGB (rotation applied): a pointer into s. */
static const uint8_t *frame_rgb(vsrc *s, iris_err *err) {
    AVFrame *f = s->frame;
    if (f->width != s->sw || f->height != s->sh) {
        av_fail(s, IRIS_EUNSUPPORTED, AVERROR_PATCHWELCOME, "the frame size changes mid-stream", err);
        return NULL;
    }
    s->sws = sws_getCachedContext(s->sws, f->width, f->height, f->format, s->sw, s->sh, AV_PIX_FMT_RGB24,
                                  SWS_BILINEAR | SWS_ACCURATE_RND, NULL, NULL, NULL);
    if (!s->sws) {
        iris_err_set(err, IRIS_EUNSUPPORTED, "%s: frames in pixel format %s cannot be converted to RGB", s->label,
                     av_get_pix_fmt_name(f->format));
        return NULL;
    }
    int cs = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : (int)f->colorspace;
    const int *coef = sws_getCoefficients(cs);
    int *inv, *tab, src_range, dst_range, bri, con, sat;
    if (sws_getColorspaceDetails(s->sws, &inv, &src_range, &tab, &dst_range, &bri, &con, &sat) >= 0)
        sws_setColorspaceDetails(s->sws, coef, f->color_range == AVCOL_RANGE_JPEG, tab, 1, bri, con, sat);
    uint8_t *dst[4] = {s->rgb};
    int ls[4] = {s->sw * 3};
    sws_scale(s->sws, (const uint8_t *const *)f->data, f->linesize, 0, s->sh, dst, ls);
    int r = s->info.rotation;
    if (!r) return s->rgb;
    const int W = s->sw, H = s->sh, DW = s->info.width, DH = s->info.height;
    for (int y = 0; y < DH; y++)
        for (int x = 0; x < DW; x++) {
            int sy, sx; /* numpy rot90: k=1 (90 ccw), 2, 3 (90 cw) */
            if (r == 90) sy = x, sx = W - 1 - y;
            else if (r == 180) sy = H - 1 - y, sx = W - 1 - x;
            else sy = H - 1 - x, sx = y;
            memcpy(s->turned + ((size_t)y * DW + x) * 3, s->rgb + ((size_t)sy * W + sx) * 3, 3);
        }
    return s->turned;
}

/* The presentation index of s->frame from its timestamp (constant frame rate). */
static int64_t frame_index(const vsrc *s) {
    int64_t pts = s->frame->best_effort_timestamp;
    if (pts == AV_NOPTS_VALUE) return -1;
    double t = (double)(pts - s->start_pts) * av_q2d(s->st->time_base);
    return llround(t * s->info.fps);
}

/* Whether a seek to frame `target` skips decoding from frame `cur`. */
static int worth_seeking(const vsrc *s, int64_t cur, int64_t target, const iris_video_opts *o) {
    int gap = o->seek_gap > 0 ? o->seek_gap : 64;
    double tb = av_q2d(s->st->time_base);
    if (!(tb > 0) || !(s->info.fps > 0)) return 0;
    int64_t ts = s->start_pts + (int64_t)((double)target / s->info.fps / tb);
    int n_idx = avformat_index_get_entries_count(s->st);
    if (n_idx > 1) {
        int i = av_index_search_timestamp(s->st, ts, AVSEEK_FLAG_BACKWARD);
        const AVIndexEntry *e = i >= 0 ? avformat_index_get_entry(s->st, i) : NULL;
        if (!e) return 0;
        int64_t key = llround((double)(e->timestamp - s->start_pts) * tb * s->info.fps);
        return key > cur + 1 && target - cur > 1;
    }
    return target - cur > gap;
}

static int seek_to(vsrc *s, int64_t target, iris_err *err) {
    double tb = av_q2d(s->st->time_base);
    int64_t ts = target < 0 ? s->start_pts : s->start_pts + (int64_t)((double)target / s->info.fps / tb);
    int rc = av_seek_frame(s->fmt, s->st->index, ts, AVSEEK_FLAG_BACKWARD);
    if (rc < 0) return av_fail(s, IRIS_EFORMAT, rc, "seeking failed", err);
    avcodec_flush_buffers(s->dec);
    s->eof_sent = 0;
    return 0;
}

typedef int (*frame_sink)(void *ctx, int j, const uint8_t *rgb, int width, int height, iris_err *err);

/* Decodes the frames at the ascending indices idx[0..n) and hands each to sink.  Each seek is
 * for a later frame than the one before: where a seek lands short of where the index promised
 * (an index of decode timestamps, B-frames), the frames up to the target are decoded, not sought
 * again. */
static int decode_indices(vsrc *s, const iris_video_opts *o, const int64_t *idx, int n, frame_sink sink, void *ctx,
                          iris_err *err) {
    int64_t cur = 0; /* the index of the next frame the decoder returns; -1: from its timestamp */
    int64_t sought = -1; /* the target of the last seek */
    int may_seek = 1, rc = 0;
    for (int j = 0; j < n && !rc;) {
        if (may_seek && cur >= 0 && idx[j] > sought && worth_seeking(s, cur, idx[j], o)) {
            if ((rc = seek_to(s, idx[j], err))) break;
            cur = -1, sought = idx[j];
        }
        int got = next_frame(s, err);
        if (got < 0) return got;
        if (got == 0)
            return iris_err_set(err, IRIS_EFORMAT, "%s: the video ends after frame %lld but its header claims %lld "
                                "frames (truncated?)", s->label, (long long)(cur < 0 ? 0 : cur),
                                (long long)s->info.n_frames);
        int64_t at = cur >= 0 ? cur : frame_index(s);
        if (at < 0 || at > idx[j]) { /* no timestamp, or the seek went past: decode from the start */
            if ((rc = seek_to(s, -1, err))) break;
            cur = 0, may_seek = 0;
            continue;
        }
        cur = at + 1;
        while (j < n && idx[j] == at) {
            const uint8_t *rgb = frame_rgb(s, err);
            if (!rgb) return IRIS_EFORMAT;
            rc = sink(ctx, j, rgb, s->info.width, s->info.height, err);
            if (rc) break;
            j++;
        }
    }
    return rc;
}

#define HALF_RING_BYTES ((size_t)96 << 20) /* displayed frames in half the ring, at most */

typedef struct resize_ctx {
    iris_video_prep *p;
    int width, height; /* displayed */
} resize_ctx;

/* A work-queue item: sampled frame id, its displayed bytes in the queue's slot. */
static int resize_item(void *ctx, int64_t id, const void *rgb, iris_err *err) {
    const resize_ctx *r = ctx;
    return iris_video_put_frame(r->p, (int)id, rgb, r->width, r->height, err);
}

static int sink_push(void *ctx, int j, const uint8_t *rgb, int width, int height, iris_err *err) {
    return iris_workq_push(ctx, j, rgb, err);
}

/* The clip's resize queue: as many threads as the pool has (at most as many frames as half the
 * ring holds, or as are sampled), twice as many slots of a displayed frame each, so decoding
 * goes on while every thread resizes. */
static int resizer_open(iris_workq **q, resize_ctx *r, iris_video_prep *p, const iris_video_info *info,
                        iris_err *err) {
    *r = (resize_ctx){.p = p, .width = info->width, .height = info->height};
    size_t frame = (size_t)info->width * info->height * 3;
    size_t fit = HALF_RING_BYTES / frame;
    int threads = iris_pool_threads();
    int half = fit < 1 ? 1 : fit < (size_t)threads ? (int)fit : threads;
    if (half > p->n_sampled) half = p->n_sampled > 0 ? p->n_sampled : 1;
    return iris_workq_init(q, half, 2 * half, frame, resize_item, r, err);
}

int iris_video_prepare(const char *path, const void *data, size_t n, const char *label, const iris_video_opts *o,
                       iris_video_prep *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    vsrc s;
    iris_workq *q = NULL;
    resize_ctx r;
    int rc = src_open(&s, path, data, n, label, o, 1, err);
    if (!rc && (rc = iris_video_plan(&s.info, o, out, err))) iris_err_prefix(err, "%s", s.label);
    if (!rc) rc = resizer_open(&q, &r, out, &s.info, err);
    if (!rc) rc = decode_indices(&s, o, out->indices, out->n_sampled, sink_push, q, err);
    if (!rc) rc = iris_workq_close(q, err);
    iris_workq_free(q);
    src_close(&s);
    if (!rc) rc = iris_video_finish(out, o, err);
    if (rc) iris_video_prep_free(out);
    return rc;
}

int iris_video_probe(const char *path, const void *data, size_t n, const char *label, const iris_video_opts *o,
                     iris_video_info *info, iris_err *err) {
    vsrc s;
    int rc = src_open(&s, path, data, n, label, o, 0, err);
    if (!rc) *info = s.info;
    src_close(&s);
    return rc;
}

typedef struct raw_sink {
    uint8_t *rgb;
    size_t frame;
} raw_sink;

static int sink_raw(void *ctx, int j, const uint8_t *rgb, int width, int height, iris_err *err) {
    raw_sink *r = ctx;
    memcpy(r->rgb + (size_t)j * r->frame, rgb, r->frame);
    return 0;
}

int iris_video_decode_frames(const char *path, const void *data, size_t n, const char *label,
                             const iris_video_opts *o, const int64_t *idx, int n_idx, uint8_t **rgb,
                             iris_video_info *info, iris_err *err) {
    *rgb = NULL;
    vsrc s;
    int rc = src_open(&s, path, data, n, label, o, 1, err);
    raw_sink r = {0};
    for (int j = 1; !rc && j < n_idx; j++)
        if (idx[j] <= idx[j - 1]) rc = iris_err_set(err, IRIS_EINVAL, "frame indices must ascend");
    if (!rc) {
        r.frame = (size_t)s.info.width * s.info.height * 3;
        if (!(r.rgb = malloc(r.frame * (size_t)(n_idx > 0 ? n_idx : 1))))
            rc = iris_err_set(err, IRIS_ENOMEM, "out of memory");
    }
    if (!rc) rc = decode_indices(&s, o, idx, n_idx, sink_raw, &r, err);
    if (!rc && info) *info = s.info;
    src_close(&s);
    if (rc) free(r.rgb);
    else *rgb = r.rgb;
    return rc;
}

#else /* !IRIS_VIDEO */

int iris_video_supported(void) { return 0; }

static int no_video(const char *label, iris_err *err) {
    return iris_err_set(err, IRIS_EUNSUPPORTED, "%s: this iris was built without video support (install "
                        "libavformat-dev libavcodec-dev libswscale-dev libavutil-dev and rebuild)",
                        label ? label : "video");
}

int iris_video_prepare(const char *path, const void *data, size_t n, const char *label, const iris_video_opts *o,
                       iris_video_prep *out, iris_err *err) {
    memset(out, 0, sizeof *out);
    return no_video(label ? label : path, err);
}

int iris_video_probe(const char *path, const void *data, size_t n, const char *label, const iris_video_opts *o,
                     iris_video_info *info, iris_err *err) {
    return no_video(label ? label : path, err);
}

int iris_video_decode_frames(const char *path, const void *data, size_t n, const char *label,
                             const iris_video_opts *o, const int64_t *idx, int n_idx, uint8_t **rgb,
                             iris_video_info *info, iris_err *err) {
    *rgb = NULL;
    return no_video(label ? label : path, err);
}

#endif
