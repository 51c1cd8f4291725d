/*
 * Hadoop's file system for file:// paths, as the Spark driver of a local master uses it
 * (headwater.spark.home builds it into the Spark home's jars; headwater.spark.session chooses it).
 *
 * Hadoop's RawLocalFileSystem sets the permission of every file it creates; without Hadoop's native library,
 * which the pyspark wheel does not ship, it does so by running a chmod process. A streaming query writes two
 * such files per micro-batch (its offset and commit logs), so each micro-batch started two processes: 8-9 ms of
 * each log write, against 2-3 ms with the permission set through java.nio, as here. The bits set are the same;
 * the modes java.nio cannot set (setuid, setgid, sticky) still go through Hadoop's own way.
 *
 * Compiled with Janino, the Java compiler in Spark's own jars: Java 6 syntax, no generics.
 */
package headwater.spark;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;

public class LocalFileSystem extends RawLocalFileSystem {
    public void setPermission(Path path, FsPermission permission) throws IOException {
        int mode = permission.toShort();
        if ((mode & ~0777) != 0) {
            super.setPermission(path, permission);
            return;
        }
        StringBuilder text = new StringBuilder();
        for (int bit = 8; bit >= 0; bit--) {
            text.append((mode & (1 << bit)) != 0 ? "xwr".charAt(bit % 3) : '-');
        }
        Files.setPosixFilePermissions(pathToFile(path).toPath(), PosixFilePermissions.fromString(text.toString()));
    }
}
