/* default_model.h: the model the inference commands use when none is given:
 * the demo model shipped in the repository (models/demo, trained on
 * synthetic scenes; see models/demo/README.md). */
#ifndef IRIS_CLI_DEFAULT_MODEL_H
#define IRIS_CLI_DEFAULT_MODEL_H

/* $IRIS_DEMO_MODEL when set (returned as is, even if it does not exist, so
 * the loader names it in its error); else the first of
 * <dir of the executable>/../models/demo, <dir>/../../models/demo (the
 * executable in build/ or build/NAME/) and <dir>/../share/iris/models/demo
 * (make install) that holds a config.json; else NULL.
 * The string is static: valid until the next call. */
const char *iris_default_model_dir(void);

#endif
