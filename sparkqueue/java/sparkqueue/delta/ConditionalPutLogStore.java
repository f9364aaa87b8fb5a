package sparkqueue.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.hadoop.fs.RemoteIterator;

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
 *
 * <p>Listing the log from a version ({@link #listFrom}, on every snapshot
 * update: every read and commit) asks S3 for the keys after that version's
 * ({@code ListObjectsV2} with {@code StartAfter}, through S3A's own listing, so
 * with its retries, auditing and statistics), not for the whole
 * {@code _delta_log} folder, which keeps a commit and a checksum file per
 * version for the log's retention (30 days). S3A has no public call for
 * that, so it is reached by reflection (hadoop-aws need not be on the class
 * path this compiles against); where it is not there, the folder is listed.
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
        out.write(encode(actions));
      }
      return;
    }
    byte[] text = encode(actions);
    // createFile's builder is a raw type in Hadoop's API: its build() is an Object
    try (FSDataOutputStream out = (FSDataOutputStream) fs.createFile(path).overwrite(false)
        .must(CONDITIONAL, true).build()) {
      out.write(text);
    } catch (IOException e) {
      if (isConflict(e)) {
        boolean ours;
        try {
          ours = holds(fs, path, text);
        } catch (IOException unread) {
          // whose commit it is cannot be told now: fail this one, as a lost answer
          // would, rather than let Delta commit its actions again on top of it
          unread.addSuppressed(e);
          throw unread;
        }
        if (ours) {
          return;  // this write landed, its answer was lost, and the retried PUT refused
        }
        java.nio.file.FileAlreadyExistsException exists =
            new java.nio.file.FileAlreadyExistsException(path.toString());
        exists.initCause(e);
        throw exists;
      }
      throw e;
    }
  }

  /**
   * Whether the file at {@code path} holds exactly {@code text}: then a refused create
   * lost to no other writer but to this one. A PUT whose answer was lost (a reset
   * connection, a timeout) is sent again by S3A's retries, and S3 refuses the second
   * with 412 because the first landed; taken as another writer's commit, Delta would
   * commit the same actions again at the next version (an append twice). A commit's
   * text names its transaction ({@code commitInfo.txnId}), so no other writer's is
   * the same. A file that cannot be read raises: taken as another writer's, it
   * could be this commit made twice.
   */
  static boolean holds(FileSystem fs, Path path, byte[] text) throws IOException {
    try (java.io.InputStream in = fs.open(path)) {
      byte[] found = in.readNBytes(text.length + 1);
      return java.util.Arrays.equals(found, text);
    } catch (FileNotFoundException e) {
      return false;
    }
  }

  private static byte[] encode(Iterator<String> actions) {
    StringBuilder text = new StringBuilder();
    while (actions.hasNext()) {
      text.append(actions.next()).append('\n');
    }
    return text.toString().getBytes(StandardCharsets.UTF_8);
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

  /**
   * The folder's entries from {@code path}'s name on, in order. For a Delta log on
   * S3A, one listing that starts at that key ({@link #listAfter}); for any other
   * folder (VACUUM lists a table's data folders from the name {@code "\u0000"},
   * which has no key before it), elsewhere, or where S3A's listing cannot be
   * reached, the folder's listing filtered, as Delta's. A log folder that is not
   * there is a {@link FileNotFoundException}, as Delta expects; on S3A it is
   * looked for only when the listing found nothing (saving a HEAD and a LIST on
   * every other call).
   */
  @Override
  public Iterator<FileStatus> listFrom(Path path, Configuration hadoopConf) throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    Path resolved = fs.makeQualified(path);
    boolean log = resolved.getParent() != null
        && resolved.getParent().getName().equals("_delta_log")
        && resolved.getName().compareTo("0") >= 0;
    List<FileStatus> found = isS3A(fs) && log ? listAfter(fs, resolved) : null;
    if (found == null) {
      return super.listFrom(path, hadoopConf);
    }
    if (found.isEmpty() && !fs.exists(resolved.getParent())) {
      throw new FileNotFoundException("No such file or directory: " + resolved.getParent());
    }
    String from = resolved.getName();
    return found.stream()
        .filter(f -> f.getPath().getName().compareTo(from) >= 0)
        .sorted(Comparator.comparing(FileStatus::getPath))
        .iterator();
  }

  /** Whether {@code fs} is S3A's (by name: hadoop-aws need not be on the class path). */
  static boolean isS3A(FileSystem fs) {
    return fs.getClass().getName().equals("org.apache.hadoop.fs.s3a.S3AFileSystem");
  }

  /**
   * The entries of {@code from}'s folder from {@code from}'s key on, through S3A's
   * listing of a request that starts after the key just before it; null when
   * this S3A has not the calls used (Hadoop 3.4 and 3.5 have).
   */
  public static List<FileStatus> listAfter(FileSystem fs, Path from) throws IOException {
    Path folder = from.getParent();
    try {
      Class<?> s3a = fs.getClass();
      ClassLoader loader = s3a.getClassLoader();
      Method key = s3a.getMethod("pathToKey", Path.class);
      Object request = s3a.getMethod("createListObjectsRequest", String.class, String.class)
          .invoke(fs, key.invoke(fs, folder) + "/", "/");
      Object v2 = request.getClass().getMethod("getV2").invoke(request);
      Class<?> v2Class = loader.loadClass(
          "software.amazon.awssdk.services.s3.model.ListObjectsV2Request");
      Class<?> builder = loader.loadClass(
          "software.amazon.awssdk.services.s3.model.ListObjectsV2Request$Builder");
      Object started = builder.getMethod("startAfter", String.class).invoke(
          v2Class.getMethod("toBuilder").invoke(v2), keyBefore((String) key.invoke(fs, from)));
      Object listRequest = request.getClass().getMethod("v2", v2Class)
          .invoke(null, builder.getMethod("build").invoke(started));
      Object listing = s3a.getMethod("getListing").invoke(fs);
      Object acceptor = loader.loadClass("org.apache.hadoop.fs.s3a.Listing$AcceptAllButSelfAndS3nDirs")
          .getConstructor(Path.class).newInstance(folder);
      Object span = s3a.getMethod("getActiveAuditSpan").invoke(fs);
      PathFilter all = p -> true;
      for (Method m : listing.getClass().getMethods()) {
        if (m.getName().equals("createFileStatusListingIterator") && m.getParameterCount() == 5) {
          RemoteIterator<?> it = (RemoteIterator<?>) m.invoke(
              listing, folder, listRequest, all, acceptor, span);
          List<FileStatus> found = new ArrayList<>();
          while (it.hasNext()) {
            found.add((FileStatus) it.next());
          }
          return found;
        }
      }
      return null;
    } catch (InvocationTargetException e) {
      if (e.getCause() instanceof IOException) {
        throw (IOException) e.getCause();
      }
      if (e.getCause() instanceof RuntimeException) {
        throw (RuntimeException) e.getCause();
      }
      throw new IOException(e.getCause());
    } catch (ReflectiveOperationException | ClassCastException e) {
      return null;
    }
  }

  /** The greatest key that sorts before {@code key}: its last character, one less. */
  static String keyBefore(String key) {
    char last = key.charAt(key.length() - 1);
    return key.substring(0, key.length() - 1) + (char) (last - 1);
  }

  /** A PUT is seen whole or not at all. */
  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
    return false;
  }
}
