/* positions.c: get_rope_index for image and video prompts (see positions.h). */
#include "positions.h"

#include "err.h"

static int is_vision(int32_t id, int image_token_id, int video_token_id) {
    return id == image_token_id || (video_token_id >= 0 && id == video_token_id);
}

int iris_pos_rope_index(const int32_t *ids, int n, int image_token_id, const int *grid_thw, int n_images,
                        int spatial_merge_size, int32_t *pos, int *rope_delta, iris_err *err) {
    return iris_pos_rope_index_av(ids, n, image_token_id, -1, grid_thw, n_images, spatial_merge_size, pos,
                                  rope_delta, err);
}

int iris_pos_rope_index_av(const int32_t *ids, int n, int image_token_id, int video_token_id, const int *grid_thw,
                           int n_images, int spatial_merge_size, int32_t *pos, int *rope_delta, iris_err *err) {
    if (n < 0 || spatial_merge_size <= 0)
        return iris_err_set(err, IRIS_EINVAL, "positions: bad arguments (n %d, merge %d)", n, spatial_merge_size);
    int64_t cur = 0, max_pos = -1;
    int img = 0;
    for (int i = 0; i < n;) {
        if (!is_vision(ids[i], image_token_id, video_token_id)) {
            pos[i] = pos[n + i] = pos[2 * n + i] = (int32_t)cur;
            max_pos = cur;
            cur++;
            i++;
            continue;
        }
        if (img >= n_images)
            return iris_err_set(err, IRIS_EINVAL,
                                "positions: image token at index %d but only %d image(s) were given", i, n_images);
        const int *g = grid_thw + 3 * img;
        if (g[0] != 1 || g[1] <= 0 || g[2] <= 0 || g[1] % spatial_merge_size || g[2] % spatial_merge_size)
            return iris_err_set(err, IRIS_EINVAL,
                                "positions: image %d has grid (%d, %d, %d); need t = 1 and h, w multiples of %d",
                                img, g[0], g[1], g[2], spatial_merge_size);
        int gh = g[1] / spatial_merge_size, gw = g[2] / spatial_merge_size;
        int64_t count = (int64_t)gh * gw;
        if (i + count > n)
            return iris_err_set(err, IRIS_EINVAL,
                                "positions: image %d needs %lld tokens at index %d but the prompt has %d tokens", img,
                                (long long)count, i, n);
        for (int64_t k = 0; k < count; k++) {
            if (ids[i + k] != ids[i])
                return iris_err_set(err, IRIS_EINVAL,
                                    "positions: image %d has %lld image tokens, its grid (%d, %d) needs %lld", img,
                                    (long long)k, g[1], g[2], (long long)count);
            int a = (int)(k / gw), b = (int)(k % gw);
            pos[i + k] = (int32_t)cur;
            pos[n + i + k] = (int32_t)(cur + a);
            pos[2 * n + i + k] = (int32_t)(cur + b);
        }
        int64_t top = cur + (gh > gw ? gh : gw) - 1;
        if (top > max_pos) max_pos = top;
        cur += gh > gw ? gh : gw;
        i += (int)count;
        img++;
    }
    if (img != n_images)
        return iris_err_set(err, IRIS_EINVAL, "positions: %d image(s) given but the prompt has %d image run(s)",
                            n_images, img);
    if (rope_delta) *rope_delta = (int)(max_pos + 1 - n);
    return IRIS_OK;
}
