/**
 * What one line of a `fleet batch submit` file holds, as `--help` and a line's error say it
 * (the fields of BatchSessionInput). A module of its own so that `--help` loads no more than it.
 */
export const BATCH_LINE_SHAPE = "{customId?, agent, input, metadata?, messages?, sessionEvents?}";
