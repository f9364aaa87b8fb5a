package sparkqueue.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A Delta log store for object stores that honour conditional writes (S3's
 * {@code If-None-Match: *}, as do MinIO, R2 and versitygw): safe with many
 * writers, in many Spark applications, without a lock service.
 *
 * <p>Delta commits version N by writing {@code _delta_log/N.json} only if no
 * writer has: the log store must refuse to replace it. Delta's own log store
 * for s3a ({@code S3SingleDriverLogStore}) checks inside one JVM only, so two
 * applications can both write N and the second silently replaces the first: a
 * commit is lost. Here a new file is one conditional PUT (Hadoop's
 * {@code createFile(path).must("fs.option.create.conditional.overwrite", true)},
 * which S3A sends as {@code If-None-Match: *}); the writer that loses gets HTTP
 * 412, which this turns into {@link java.nio.file.FileAlreadyExistsException}:
 * Delta then reads the winner's commit and retries its own on top of it.
 * Files written with {@code overwrite} (Delta's {@code _last_checkpoint} hint)
 * are plain PUTs, as Delta expects of them.
 */
public class ConditionalPutLogStore extends HadoopFileSystemLogStore {

  /** The Hadoop option that makes a create a conditional PUT. */
  public static final String CONDITIONAL = "fs.option.create.conditional.overwrite";

  public ConditionalPutLogStore(Configuration hadoopConf) {
    super(hadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite,
                    Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    if (overwrite) {
      try (FSDataOutputStream out = fs.create(path, true)) {
        writeActions(out, actions);
      }
      return;
    }
    // createFile's builder is a raw type in Hadoop's API: its build() is an Object
    try (FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path).overwrite(false)
        .must(CONDITIONAL, true).build()) {
      writeActions(out, actions);
    } catch (IOException e) {
      if (isConflict(e)) {
        java.nio.file.FileAlreadyExistsException exists =
            new java.nio.file.FileAlreadyExistsException(path.toString());
        exists.initCause(e);
        throw exists;
      }
      throw e;
    }
  }

  /**
   * Whether a failed create lost to another writer's file: S3A's answer to HTTP 412
   * ({@code RemoteFileChangedException}, or S3's error code {@code PreconditionFailed}),
   * or a file found there. Not a bare "412" in a message: commit file names hold
   * such digits.
   */
  static boolean isConflict(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      String name = t.getClass().getName();
      String text = String.valueOf(t.getMessage());
      if (t instanceof java.nio.file.FileAlreadyExistsException
          || t instanceof org.apache.hadoop.fs.FileAlreadyExistsException
          || name.endsWith("RemoteFileChangedException")
          || text.contains("PreconditionFailed")) {
        return true;
      }
    }
    return false;
  }

  private static void writeActions(FSDataOutputStream out, Iterator<String> actions)
      throws IOException {
    while (actions.hasNext()) {
      out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
    }
  }

  /** A PUT is seen whole or not at all. */
  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }
}
